package rdma

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// rxClass is the receive QP a flow rule delivers to. With RSS each class is
// a hashing QP over the indirection table; without, every class is queue
// 0's QP.
type rxClass uint8

const (
	// classOther receives what is not hashed (ARP, ICMP, neighbour
	// discovery, other EtherTypes): queue 0.
	classOther rxClass = iota
	classTCP4          // hashed over IPv4 addresses and TCP ports
	classUDP4          // hashed over IPv4 addresses and UDP ports
	classTCP6          // hashed over IPv6 addresses and TCP ports
	classUDP6          // hashed over IPv6 addresses and UDP ports
	numClasses
)

func (c rxClass) String() string {
	return [...]string{"other", "tcp4", "udp4", "tcp6", "udp6"}[c]
}

// EtherTypes and IP protocols the rules match.
const (
	etherTypeIPv4 = 0x0800
	etherTypeARP  = 0x0806
	etherTypeIPv6 = 0x86dd
	protoTCP      = 6
	protoUDP      = 17
)

// Flow rule priorities (lower wins): the transport rules are more specific
// than the catch-all rules of the same destination.
const (
	prioTransport = 0
	prioOther     = 1
)

// flowRule is one ibv_create_flow rule: frames to DstMAC (of EtherType,
// to DstIP, of Proto, where set) go to the QP of Class. A rule that does not
// trap (DontTrap) lets the frame go on to the kernel as well.
type flowRule struct {
	Class     rxClass
	Priority  uint16
	DontTrap  bool
	DstMAC    net.HardwareAddr
	EtherType uint16     // 0: any
	DstIP     netip.Addr // invalid: any (within EtherType)
	Proto     uint8      // 0: any (within EtherType)
}

func (r flowRule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dst %s", r.DstMAC)
	if r.EtherType != 0 {
		fmt.Fprintf(&b, " type %#04x", r.EtherType)
	}
	if r.DstIP.IsValid() {
		fmt.Fprintf(&b, " ip %s", r.DstIP)
	}
	switch r.Proto {
	case protoTCP:
		b.WriteString(" tcp")
	case protoUDP:
		b.WriteString(" udp")
	}
	fmt.Fprintf(&b, " -> %s (priority %d", r.Class, r.Priority)
	if r.DontTrap {
		b.WriteString(", the kernel gets a copy")
	}
	b.WriteString(")")
	return b.String()
}

var broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// planFlows returns the rules that steer the link's traffic to it and leave
// everything else to the kernel.
//
// When the link has a MAC of its own (not the interface's), every frame to
// that MAC is the link's. When it shares the interface's MAC, only frames to
// its addresses are: IP by destination address, and ARP to that MAC is
// copied, not taken, since the kernel needs it as well. Either way the link
// gets copies of broadcast ARP and of the neighbour solicitations for its
// IPv6 addresses (solicited-node multicast), which the kernel keeps too.
func planFlows(mac, netdevMAC net.HardwareAddr, addrs []netip.Addr) []flowRule {
	transport := func(dst netip.Addr, v6 bool) []flowRule {
		et, tcp, udp := uint16(etherTypeIPv4), classTCP4, classUDP4
		if v6 {
			et, tcp, udp = etherTypeIPv6, classTCP6, classUDP6
		}
		return []flowRule{
			{Class: tcp, Priority: prioTransport, DstMAC: mac, EtherType: et, DstIP: dst, Proto: protoTCP},
			{Class: udp, Priority: prioTransport, DstMAC: mac, EtherType: et, DstIP: dst, Proto: protoUDP},
		}
	}
	var rules []flowRule
	if !bytes.Equal(mac, netdevMAC) {
		rules = append(rules, transport(netip.Addr{}, false)...)
		rules = append(rules, transport(netip.Addr{}, true)...)
		rules = append(rules, flowRule{Class: classOther, Priority: prioOther, DstMAC: mac})
	} else {
		for _, a := range addrs {
			et := uint16(etherTypeIPv4)
			if a.Is6() {
				et = etherTypeIPv6
			}
			rules = append(rules, transport(a, a.Is6())...)
			rules = append(rules, flowRule{Class: classOther, Priority: prioOther, DstMAC: mac, EtherType: et, DstIP: a})
		}
		rules = append(rules, flowRule{Class: classOther, Priority: prioOther, DontTrap: true, DstMAC: mac, EtherType: etherTypeARP})
	}
	rules = append(rules, flowRule{Class: classOther, Priority: prioOther, DontTrap: true, DstMAC: broadcastMAC, EtherType: etherTypeARP})
	for _, a := range addrs {
		if a.Is6() {
			rules = append(rules, flowRule{Class: classOther, Priority: prioOther, DontTrap: true,
				DstMAC: solicitedNodeMAC(a), EtherType: etherTypeIPv6})
		}
	}
	return rules
}

// solicitedNodeMAC is the Ethernet multicast address of a's solicited-node
// group (RFC 4291 2.7.1, RFC 2464 7): 33:33:ff and a's last three bytes.
func solicitedNodeMAC(a netip.Addr) net.HardwareAddr {
	b := a.As16()
	return net.HardwareAddr{0x33, 0x33, 0xff, b[13], b[14], b[15]}
}
