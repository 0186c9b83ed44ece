package polarnet

import (
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// Received frames keep their headers in a view of their own. gVisor's IPv4
// and IPv6 layers take a reference to the network header's view
// (NetworkHeader().View()) and then read headers again; the buffer sees its
// chunk shared and clones it, copying the whole chunk: 4 to 64 KiB for a
// data segment, once per segment received. With the headers apart, the clone
// copies a 128-byte chunk.

// splitHeadersAbove is the frame length from which the headers get their own
// view: for a shorter frame the clone costs about what the extra view would.
const splitHeadersAbove = 256

// headerSplit returns where a received Ethernet frame splits: after its
// Ethernet, IP and TCP or UDP headers, or 0 to keep it whole.
func headerSplit(ethType tcpip.NetworkProtocolNumber, frame []byte) int {
	if len(frame) <= splitHeadersAbove {
		return 0
	}
	n := headersLength(ethType, frame[header.EthernetMinimumSize:])
	if n == 0 || header.EthernetMinimumSize+n == len(frame) {
		return 0
	}
	return header.EthernetMinimumSize + n
}

// headersLength returns the length of an IP packet's network and TCP or UDP
// headers, the Ethernet header already removed; 0 for anything else, which
// stays in one view.
func headersLength(ethType tcpip.NetworkProtocolNumber, pkt []byte) int {
	proto, l4 := transportOf(ethType, pkt)
	if l4 == nil {
		return 0
	}
	var l4Headers int
	switch tcpip.TransportProtocolNumber(proto) {
	case header.TCPProtocolNumber:
		if len(l4) < header.TCPMinimumSize {
			return 0
		}
		l4Headers = int(header.TCP(l4).DataOffset())
		if l4Headers < header.TCPMinimumSize || l4Headers > len(l4) {
			return 0
		}
	case header.UDPProtocolNumber:
		l4Headers = header.UDPMinimumSize
		if l4Headers > len(l4) {
			return 0
		}
	default:
		return 0
	}
	return len(pkt) - len(l4) + l4Headers
}

// transportOf returns an IP packet's transport protocol and what follows its
// IP headers, the Ethernet header already removed; nil for anything else
// (not IP, a fragment, malformed).
func transportOf(ethType tcpip.NetworkProtocolNumber, pkt []byte) (proto uint8, l4 []byte) {
	switch ethType {
	case header.IPv4ProtocolNumber:
		if len(pkt) < header.IPv4MinimumSize {
			return 0, nil
		}
		ip := header.IPv4(pkt)
		hl := int(ip.HeaderLength())
		if hl < header.IPv4MinimumSize || hl > len(pkt) || ip.More() || ip.FragmentOffset() != 0 {
			return 0, nil
		}
		return ip.Protocol(), pkt[hl:]
	case header.IPv6ProtocolNumber:
		if len(pkt) < header.IPv6MinimumSize {
			return 0, nil
		}
		proto, l4, ok := skipIPv6Extensions(header.IPv6(pkt).NextHeader(), pkt[header.IPv6MinimumSize:])
		if !ok {
			return 0, nil
		}
		return proto, l4
	}
	return 0, nil
}

// receivedTCP reads a received IP packet (Ethernet header removed) as a TCP
// segment: its flow keyed as the segments we send on it are, and its TCP
// header; ok is false for anything else.
func receivedTCP(ethType tcpip.NetworkProtocolNumber, pkt []byte) (key flowKey, th header.TCP, ok bool) {
	proto, l4 := transportOf(ethType, pkt)
	if tcpip.TransportProtocolNumber(proto) != header.TCPProtocolNumber || len(l4) < header.TCPMinimumSize {
		return key, nil, false
	}
	switch ethType {
	case header.IPv4ProtocolNumber:
		ip := header.IPv4(pkt)
		key.src, key.dst = ip.DestinationAddress(), ip.SourceAddress()
	case header.IPv6ProtocolNumber:
		ip := header.IPv6(pkt)
		key.src, key.dst = ip.DestinationAddress(), ip.SourceAddress()
	}
	th = header.TCP(l4)
	key.srcPort, key.dstPort = th.DestinationPort(), th.SourcePort()
	return key, th, true
}
