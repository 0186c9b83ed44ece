package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/polarnet/polarnet/link"
)

// The vanilla-pipe baseline: gVisor as a program would use it without
// polarnet. An unmodified stack with gVisor's defaults (Reno, SACK with
// RACK-TLP, 200 ms minimum RTO, its buffer sizes; no options set), conns from
// adapters/gonet, and a plain link endpoint over the same in-memory pipe the
// p2p mode uses: one frame per write, one goroutine per queue delivering
// received frames (as gVisor's fdbased endpoint has one per file descriptor),
// no checksum offload advertised (gVisor computes and verifies every
// checksum), no batching, no GSO. Always MTU 1500.

// vanillaMTU is the baseline's MTU, whatever -mtu says.
const vanillaMTU = 1500

// vanillaNIC is the NIC of each vanilla stack.
const vanillaNIC tcpip.NICID = 1

// vanillaStack is one gVisor stack on one end of a pipe.
type vanillaStack struct {
	st   *stack.Stack
	link link.Link
	ep   *pipeEndpoint
}

func newVanillaStack(l link.Link, addr netip.Prefix) (*vanillaStack, error) {
	info := l.Info()
	ep := &pipeEndpoint{
		mac:  tcpip.LinkAddress(info.MAC),
		mtu:  uint32(info.MTU),
		rxSz: info.RxFrameSize,
		done: make(chan struct{}),
	}
	for _, q := range l.Queues() {
		ep.queues = append(ep.queues, &pipeEndpointQueue{q: q})
	}
	st := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol},
	})
	fail := func(format string, args ...any) (*vanillaStack, error) {
		st.Destroy()
		l.Close()
		return nil, fmt.Errorf("vanilla gVisor: "+format, args...)
	}
	if err := st.CreateNIC(vanillaNIC, ep); err != nil {
		return fail("creating NIC: %s", err)
	}
	pa := tcpip.ProtocolAddress{
		Protocol:          ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFromSlice(addr.Addr().AsSlice()), PrefixLen: addr.Bits()},
	}
	if err := st.AddProtocolAddress(vanillaNIC, pa, stack.AddressProperties{}); err != nil {
		return fail("adding address: %s", err)
	}
	st.SetRouteTable([]tcpip.Route{{Destination: pa.AddressWithPrefix.Subnet(), NIC: vanillaNIC}})
	ep.startReceiving()
	return &vanillaStack{st: st, link: l, ep: ep}, nil
}

func (v *vanillaStack) Close() error {
	v.st.Close()
	err := v.link.Close()
	<-v.ep.done
	v.st.Wait()
	return err
}

func (v *vanillaStack) retrans() int64 { return int64(v.st.Stats().TCP.Retransmits.Value()) }

func (v *vanillaStack) listen(addr netip.AddrPort) (net.Listener, error) {
	return gonet.ListenTCP(v.st, fullAddr(addr), ipv4.ProtocolNumber)
}

func (v *vanillaStack) dialer(addr netip.AddrPort) dialFunc {
	return func(ctx context.Context) (net.Conn, error) {
		return gonet.DialContextTCP(ctx, v.st, fullAddr(addr), ipv4.ProtocolNumber)
	}
}

func fullAddr(ap netip.AddrPort) tcpip.FullAddress {
	return tcpip.FullAddress{NIC: vanillaNIC, Addr: tcpip.AddrFromSlice(ap.Addr().AsSlice()), Port: ap.Port()}
}

// pipeEndpoint is a minimal Ethernet stack.LinkEndpoint over the queues of
// a polarnet link: WritePackets writes the frames out at once on the queue
// the first packet's flow hash picks, under that queue's lock (a queue takes
// one writer at a time), and a goroutine per queue reads frames and delivers
// them.
type pipeEndpoint struct {
	queues     []*pipeEndpointQueue
	mac        tcpip.LinkAddress
	mtu        uint32
	rxSz       int
	dispatcher atomic.Pointer[stack.NetworkDispatcher]
	done       chan struct{} // closed when every receiver has returned
	drops      atomic.Int64  // frames the pipe had no room for
}

type pipeEndpointQueue struct {
	q  link.Queue
	mu sync.Mutex
	tx []link.TxFrame
}

var _ stack.LinkEndpoint = (*pipeEndpoint)(nil)

func (e *pipeEndpoint) MTU() uint32                      { return e.mtu }
func (e *pipeEndpoint) SetMTU(mtu uint32)                { e.mtu = mtu }
func (e *pipeEndpoint) MaxHeaderLength() uint16          { return header.EthernetMinimumSize }
func (e *pipeEndpoint) LinkAddress() tcpip.LinkAddress   { return e.mac }
func (e *pipeEndpoint) SetLinkAddress(tcpip.LinkAddress) {}
func (e *pipeEndpoint) Capabilities() stack.LinkEndpointCapabilities {
	return stack.CapabilityResolutionRequired
}
func (e *pipeEndpoint) IsAttached() bool                        { return e.dispatcher.Load() != nil }
func (e *pipeEndpoint) Wait()                                   {}
func (e *pipeEndpoint) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareEther }
func (e *pipeEndpoint) Close()                                  {}
func (e *pipeEndpoint) SetOnCloseAction(func())                 {}

func (e *pipeEndpoint) Attach(d stack.NetworkDispatcher) {
	if d == nil {
		e.dispatcher.Store(nil)
		return
	}
	e.dispatcher.Store(&d)
}

func (e *pipeEndpoint) AddHeader(pkt *stack.PacketBuffer) {
	eth := header.Ethernet(pkt.LinkHeader().Push(header.EthernetMinimumSize))
	eth.Encode(&header.EthernetFields{
		SrcAddr: e.mac,
		DstAddr: pkt.EgressRoute.RemoteLinkAddress,
		Type:    pkt.NetworkProtocolNumber,
	})
}

func (e *pipeEndpoint) ParseHeader(pkt *stack.PacketBuffer) bool {
	_, ok := pkt.LinkHeader().Consume(header.EthernetMinimumSize)
	return ok
}

// WritePackets writes the frames; those the pipe has no room for are
// dropped, as a NIC would, and TCP retransmits them.
func (e *pipeEndpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	all := pkts.AsSlice()
	if len(all) == 0 {
		return 0, nil
	}
	q := e.queues[all[0].Hash%uint32(len(e.queues))]
	q.mu.Lock()
	defer q.mu.Unlock()
	q.tx = q.tx[:0]
	for _, pkt := range all {
		q.tx = append(q.tx, link.TxFrame{Segs: pkt.AsSlices()})
	}
	n, err := q.q.WriteBurst(q.tx)
	clear(q.tx)
	if err != nil && n == 0 {
		return 0, &tcpip.ErrClosedForSend{}
	}
	e.drops.Add(int64(len(all) - n))
	return len(all), nil
}

// startReceiving starts a receiver per queue and closes done once all
// have returned.
func (e *pipeEndpoint) startReceiving() {
	var wg sync.WaitGroup
	for _, q := range e.queues {
		wg.Go(func() { e.receive(q.q) })
	}
	go func() {
		wg.Wait()
		close(e.done)
	}()
}

// receive delivers frames from q until the link is closed.
func (e *pipeEndpoint) receive(q link.Queue) {
	frames := make([]link.RxFrame, 32)
	for i := range frames {
		frames[i].Buf = make([]byte, e.rxSz)
	}
	for {
		n, err := q.ReadBurst(frames)
		for _, f := range frames[:n] {
			e.deliver(f.Buf[:f.Len])
		}
		if errors.Is(err, link.ErrClosed) {
			return
		}
		if n == 0 {
			if err := q.WaitRead(); errors.Is(err, link.ErrClosed) {
				return
			}
		}
	}
}

func (e *pipeEndpoint) deliver(frame []byte) {
	d := e.dispatcher.Load()
	if d == nil || len(frame) < header.EthernetMinimumSize {
		return
	}
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(frame)})
	defer pkt.DecRef()
	if !e.ParseHeader(pkt) {
		return
	}
	(*d).DeliverNetworkPacket(header.Ethernet(frame).Type(), pkt)
}
