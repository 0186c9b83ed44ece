package polarnet

import (
	"net/netip"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/polarnet/polarnet/link"
)

// Where a received frame goes when a stack has several shards.
const (
	toReceiver = -1 // the shard that received it (ARP requests, pings)
	toAll      = -2 // every shard (neighbour replies, router adverts, errors)
	// udpShard holds every UDP socket: datagrams of one socket may come from
	// any port, so they cannot be spread by flow.
	udpShard = 0
)

// owner returns the shard a received frame, whose headers are h, belongs
// to: toReceiver, toAll or a shard index. Every shard has the stack's
// addresses, so anything that is not a flow may be answered by whichever
// shard received it; only neighbour information must reach them all, since
// each shard has its own cache.
func (st *Stack) owner(h *rxHeaders) int {
	switch h.ethType {
	case header.ARPProtocolNumber:
		if a := header.ARP(h.pkt); len(h.pkt) >= header.ARPSize && a.Op() == header.ARPReply {
			return toAll
		}
		return toReceiver
	case header.IPv4ProtocolNumber, header.IPv6ProtocolNumber:
		switch {
		case !h.hasIP:
			return toReceiver
		case h.fragment:
			// Reassembly needs every fragment on one shard; TCP peers set
			// DF, so fragments are (nearly always) UDP. An IPv6 chain we
			// cannot follow goes there too.
			return udpShard
		case h.l4 == nil:
			return toReceiver // an IPv4 header length out of bounds
		}
		return st.transportOwner(h.proto, h.src, h.dst, h.l4, false)
	}
	return toReceiver
}

// transportOwner classifies by transport header. For an ICMP error it is
// called again on the packet the error quotes, which we sent: inverted.
func (st *Stack) transportOwner(proto uint8, src, dst tcpip.Address, l4 []byte, inverted bool) int {
	switch tcpip.TransportProtocolNumber(proto) {
	case header.TCPProtocolNumber:
		if len(l4) < 4 {
			return toReceiver
		}
		tcp := header.TCP(l4)
		local, remote := tcp.DestinationPort(), tcp.SourcePort()
		localAddr, remoteAddr := dst, src
		if inverted {
			local, remote = remote, local
			localAddr, remoteAddr = remoteAddr, localAddr
		}
		return st.flowOwner(localAddr, local, remoteAddr, remote)
	case header.UDPProtocolNumber:
		return udpShard
	case header.ICMPv4ProtocolNumber:
		if len(l4) < header.ICMPv4MinimumSize {
			return toReceiver
		}
		switch header.ICMPv4(l4).Type() {
		case header.ICMPv4DstUnreachable, header.ICMPv4TimeExceeded, header.ICMPv4ParamProblem:
			return st.quotedOwner(header.IPv4ProtocolNumber, l4[header.ICMPv4MinimumSize:])
		}
		return toReceiver
	case header.ICMPv6ProtocolNumber:
		if len(l4) < header.ICMPv6MinimumSize {
			return toReceiver
		}
		switch header.ICMPv6(l4).Type() {
		case header.ICMPv6NeighborAdvert, header.ICMPv6RouterAdvert, header.ICMPv6RouterSolicit, header.ICMPv6RedirectMsg:
			return toAll
		case header.ICMPv6DstUnreachable, header.ICMPv6PacketTooBig, header.ICMPv6TimeExceeded, header.ICMPv6ParamProblem:
			return st.quotedOwner(header.IPv6ProtocolNumber, l4[header.ICMPv6ErrorHeaderSize:])
		}
		return toReceiver
	}
	return toReceiver
}

// quotedOwner finds the flow of the packet an ICMP error quotes, of
// network protocol proto; errors it cannot attribute go to every shard
// (those without the flow ignore them). A quoted IPv4 fragment is read as
// if whole.
func (st *Stack) quotedOwner(proto tcpip.NetworkProtocolNumber, quoted []byte) int {
	var q rxHeaders
	q.parse(proto, quoted)
	if q.netLen == 0 {
		return toAll
	}
	switch tcpip.TransportProtocolNumber(q.proto) {
	case header.TCPProtocolNumber, header.UDPProtocolNumber:
		return st.transportOwner(q.proto, q.src, q.dst, q.pkt[q.netLen:], true)
	}
	return toAll
}

// flowOwner is the shard whose queue the link delivers the flow on: the
// link's own rule when it steers, link.PortSteering otherwise.
func (st *Stack) flowOwner(localAddr tcpip.Address, local uint16, remoteAddr tcpip.Address, remote uint16) int {
	if st.steerer != nil {
		la, _ := netip.AddrFromSlice(localAddr.AsSlice())
		ra, _ := netip.AddrFromSlice(remoteAddr.AsSlice())
		if q := st.steerer.RxQueue(netip.AddrPortFrom(la, local), netip.AddrPortFrom(ra, remote)); q >= 0 && q < len(st.shards) {
			return q
		}
	}
	return link.PortSteering(local, remote, len(st.shards))
}

// handoff is a frame on its way from the shard that received it to the
// shard that owns it.
type handoff struct {
	proto   tcpip.NetworkProtocolNumber
	payload buffer.Buffer
}

// handoffRingSize bounds the frames in flight between two shards; beyond it
// frames are dropped (and counted), as a full NIC ring would.
const handoffRingSize = 1024

// handoffRing is a single-producer, single-consumer ring: only the sending
// shard's poller pushes, only the owner's poller pops.
type handoffRing struct {
	head, tail atomic.Uint64 // head: next to pop; tail: next to push
	slots      [handoffRingSize]handoff
}

func (r *handoffRing) push(h handoff) bool {
	t := r.tail.Load()
	if t-r.head.Load() == handoffRingSize {
		return false
	}
	r.slots[t%handoffRingSize] = h
	r.tail.Store(t + 1)
	return true
}

func (r *handoffRing) pop() (handoff, bool) {
	h := r.head.Load()
	if h == r.tail.Load() {
		return handoff{}, false
	}
	slot := &r.slots[h%handoffRingSize]
	out := *slot
	*slot = handoff{}
	r.head.Store(h + 1)
	return out, true
}

func (r *handoffRing) empty() bool { return r.head.Load() == r.tail.Load() }
