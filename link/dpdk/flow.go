package dpdk

import (
	"fmt"
	"net"
	"net/netip"
)

// flowKind is what a flow rule matches.
type flowKind uint8

const (
	// flowIPv4Dst matches IPv4 packets to an address (and to the link's MAC).
	flowIPv4Dst flowKind = iota + 1
	// flowIPv6Dst matches IPv6 packets to an address (and, for unicast
	// addresses, to the link's MAC).
	flowIPv6Dst
	// flowARPTarget matches ARP packets whose target protocol address is
	// an address: requests for it and replies to it.
	flowARPTarget
)

// flowRule is one rte_flow rule of isolated mode: a match and the queues it
// sends to (one: a QUEUE action; more: an RSS action over them).
type flowRule struct {
	kind   flowKind
	mac    net.HardwareAddr // destination MAC to match; nil: any
	addr   netip.Addr
	queues int // 1: queue 0 only; n: RSS over queues 0..n-1
}

func (r flowRule) String() string {
	var what string
	switch r.kind {
	case flowIPv4Dst:
		what = fmt.Sprintf("eth dst %v / ipv4 dst %v", r.mac, r.addr)
	case flowIPv6Dst:
		if r.mac != nil {
			what = fmt.Sprintf("eth dst %v / ipv6 dst %v", r.mac, r.addr)
		} else {
			what = fmt.Sprintf("eth / ipv6 dst %v", r.addr)
		}
	case flowARPTarget:
		what = fmt.Sprintf("eth / arp_eth_ipv4 tpa %v", r.addr)
	default:
		what = fmt.Sprintf("flowKind(%d)", r.kind)
	}
	if r.queues > 1 {
		return fmt.Sprintf("%s -> rss queues 0-%d", what, r.queues-1)
	}
	return what + " -> queue 0"
}

// isolateRules returns the flow rules that give a link in isolated mode the
// traffic of addrs and nothing else:
//   - IPv4 and IPv6 packets to each address and to mac, spread over all
//     queues;
//   - for IPv4 addresses, ARP whose target is the address (requests for it,
//     replies to the link's own requests), to queue 0;
//   - for IPv6 addresses, packets to the address's solicited-node multicast
//     group (neighbour solicitations), to queue 0; neighbour advertisements
//     to the address itself are covered by the first rule.
//
// Everything else — other addresses, ARP for the kernel's addresses — stays
// with the kernel's netdev on a bifurcated NIC.
func isolateRules(mac net.HardwareAddr, addrs []netip.Addr, queues int) []flowRule {
	var rules []flowRule
	for _, a := range addrs {
		a = a.Unmap()
		if a.Is4() {
			rules = append(rules,
				flowRule{kind: flowIPv4Dst, mac: mac, addr: a, queues: queues},
				flowRule{kind: flowARPTarget, addr: a, queues: 1})
			continue
		}
		rules = append(rules,
			flowRule{kind: flowIPv6Dst, mac: mac, addr: a, queues: queues},
			flowRule{kind: flowIPv6Dst, addr: solicitedNode(a), queues: 1})
	}
	return rules
}

// solicitedNode returns the solicited-node multicast address of a
// (ff02::1:ffXX:XXXX, RFC 4291), where neighbour solicitations for it go.
func solicitedNode(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom16([16]byte{0xff, 0x02, 10: 0, 11: 0x01, 12: 0xff, 13: b[13], 14: b[14], 15: b[15]})
}
