package polarnet

import (
	"net/netip"
	"slices"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// martian reports whether a received IP packet's source address can never
// be a real peer: unspecified, loopback, multicast, broadcast or reserved,
// or one of the stack's own addresses (its own packets never come from the
// link).
// Such packets are dropped before gVisor sees them, as Linux does with
// rp_filter and its martian checks.
func (st *Stack) martian(h *rxHeaders) bool {
	if !h.hasIP {
		return false
	}
	var src netip.Addr
	switch h.ethType {
	case header.IPv4ProtocolNumber:
		src = netip.AddrFrom4(h.src.As4())
		if src.IsUnspecified() || src.As4()[0] == 0 || src.As4()[0] >= 240 {
			return true // 0.0.0.0/8, reserved 240/4 and the limited broadcast
		}
	case header.IPv6ProtocolNumber:
		src = netip.AddrFrom16(h.src.As16())
		if src.IsUnspecified() {
			// Duplicate address detection and router solicitation send from
			// ::, and so do MLD reports before a link-local address is
			// ready (RFC 3590), behind a hop-by-hop header (router alert).
			next := header.IPv6(h.pkt).NextHeader()
			if next == uint8(header.IPv6HopByHopOptionsExtHdrIdentifier) && len(h.pkt) > header.IPv6MinimumSize {
				next = h.pkt[header.IPv6MinimumSize]
			}
			return next != uint8(header.ICMPv6ProtocolNumber)
		}
	}
	if src.IsLoopback() || src.IsMulticast() {
		return true
	}
	return slices.Contains(st.ownOrBroadcast, src)
}

// ownOrBroadcast lists the stack's own addresses and the broadcast addresses
// of its IPv4 subnets: sources no peer sends from. Computed once, at New,
// because the martian check runs on every received packet.
func ownOrBroadcast(addrs []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, p := range addrs {
		out = append(out, p.Addr())
		if p.Addr().Is4() && p.Bits() < 31 {
			out = append(out, lastAddr(p))
		}
	}
	return out
}

// lastAddr is the highest address of prefix p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	for i := p.Bits(); i < 32; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	return netip.AddrFrom4(b)
}
