package polarnet

import (
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/polarnet/polarnet/link"
)

// nicEndpoint adapts one link queue pair to a gVisor NIC. Ethernet framing
// lives here; frames enter through the shard's poller and leave through the
// shard's txQueue, which is installed as the NIC's queueing discipline.
type nicEndpoint struct {
	mac        tcpip.LinkAddress
	mtu        atomic.Uint32
	caps       stack.LinkEndpointCapabilities
	gsoMaxSize uint32
	dispatcher atomic.Pointer[stack.NetworkDispatcher]
	tx         *txQueue
}

var (
	_ stack.LinkEndpoint = (*nicEndpoint)(nil)
	_ stack.GSOEndpoint  = (*nicEndpoint)(nil)
)

func newNICEndpoint(info link.Info, mtu int, tx *txQueue) *nicEndpoint {
	// RX checksum offload is always advertised: the poller verifies in
	// software what the link did not (see verifyTransportChecksum), so gVisor
	// never checks twice. TX offload is advertised only when the link
	// completes checksums; the txQueue seeds what gVisor leaves blank.
	caps := stack.CapabilityResolutionRequired | stack.CapabilityRXChecksumOffload
	if info.Caps&link.CapTXChecksum != 0 {
		caps |= stack.CapabilityTXChecksumOffload
	}
	ep := &nicEndpoint{
		mac:  tcpip.LinkAddress(info.MAC),
		caps: caps,
		tx:   tx,
	}
	if info.Caps&(link.CapGSO|link.CapTXChecksum) == link.CapGSO|link.CapTXChecksum {
		ep.gsoMaxSize = uint32(info.GSOMaxSize)
	}
	ep.mtu.Store(uint32(mtu))
	return ep
}

func (e *nicEndpoint) MTU() uint32                                  { return e.mtu.Load() }
func (e *nicEndpoint) SetMTU(mtu uint32)                            { e.mtu.Store(mtu) }
func (e *nicEndpoint) MaxHeaderLength() uint16                      { return header.EthernetMinimumSize }
func (e *nicEndpoint) LinkAddress() tcpip.LinkAddress               { return e.mac }
func (e *nicEndpoint) SetLinkAddress(tcpip.LinkAddress)             {}
func (e *nicEndpoint) Capabilities() stack.LinkEndpointCapabilities { return e.caps }
func (e *nicEndpoint) IsAttached() bool                             { return e.dispatcher.Load() != nil }
func (e *nicEndpoint) Wait()                                        {}
func (e *nicEndpoint) ARPHardwareType() header.ARPHardwareType      { return header.ARPHardwareEther }
func (e *nicEndpoint) Close()                                       {}
func (e *nicEndpoint) SetOnCloseAction(func())                      {}

// Attach implements stack.NetworkLinkEndpoint. A nil dispatcher detaches.
func (e *nicEndpoint) Attach(d stack.NetworkDispatcher) {
	if d == nil {
		e.dispatcher.Store(nil)
		return
	}
	e.dispatcher.Store(&d)
}

// GSOMaxSize implements stack.GSOEndpoint.
func (e *nicEndpoint) GSOMaxSize() uint32 { return e.gsoMaxSize }

// SupportedGSO implements stack.GSOEndpoint: host GSO when the link segments
// (and so completes checksums) itself.
func (e *nicEndpoint) SupportedGSO() stack.SupportedGSO {
	if e.gsoMaxSize > 0 {
		return stack.HostGSOSupported
	}
	return stack.GSONotSupported
}

// AddHeader implements stack.NetworkLinkEndpoint.
func (e *nicEndpoint) AddHeader(pkt *stack.PacketBuffer) {
	eth := header.Ethernet(pkt.LinkHeader().Push(header.EthernetMinimumSize))
	src := pkt.EgressRoute.LocalLinkAddress
	if src == "" {
		src = e.mac
	}
	eth.Encode(&header.EthernetFields{
		SrcAddr: src,
		DstAddr: pkt.EgressRoute.RemoteLinkAddress,
		Type:    pkt.NetworkProtocolNumber,
	})
}

// ParseHeader implements stack.NetworkLinkEndpoint.
func (e *nicEndpoint) ParseHeader(pkt *stack.PacketBuffer) bool {
	_, ok := pkt.LinkHeader().Consume(header.EthernetMinimumSize)
	return ok
}

// WritePackets implements stack.LinkWriter for paths that bypass the
// queueing discipline.
func (e *nicEndpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	n := 0
	for _, pkt := range pkts.AsSlice() {
		if err := e.tx.WritePacket(pkt); err != nil {
			if n == 0 {
				return 0, err
			}
			break
		}
		n++
	}
	return n, nil
}

func (e *nicEndpoint) deliver(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) bool {
	d := e.dispatcher.Load()
	if d == nil {
		return false
	}
	(*d).DeliverNetworkPacket(proto, pkt)
	return true
}
