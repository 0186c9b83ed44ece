package afxdp

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/testenv"
)

// xdpTX stands for the redirect in these tests: the program's verdicts are
// XDP_TX (the link would take the frame) or XDP_PASS.
const xdpTX = 3

// TestProgramFilter runs the XDP program on frames in the kernel
// (BPF_PROG_TEST_RUN) and checks what each filter takes.
func TestProgramFilter(t *testing.T) {
	testenv.RequirePriv(t)
	other4, other6 := netip.MustParseAddr("198.18.0.9"), netip.MustParseAddr("fd00:198:18::9")
	addrs := []netip.Prefix{netip.PrefixFrom(stack4, 32), netip.PrefixFrom(stack6, 128), netip.MustParsePrefix("198.19.255.254/32")}
	high := netip.MustParseAddr("198.19.255.254") // its words have the top bit set both ways round
	frames := []struct {
		name            string
		frame           []byte
		stack, tcp, all bool
		v6              bool // an IPv6 frame (else IPv4, ARP or other)
	}{
		{"IPv4 TCP to us", ipv4Frame(stack4, protoTCP), true, true, true, false},
		{"IPv4 TCP to our second address", ipv4Frame(high, protoTCP), true, true, true, false},
		{"IPv4 TCP to another host", ipv4Frame(other4, protoTCP), false, false, true, false},
		{"IPv4 UDP to us", ipv4Frame(stack4, protoUDP), true, false, true, false},
		{"IPv4 ICMP to us", ipv4Frame(stack4, protoICMP), true, false, true, false},
		{"IPv4 GRE to us", ipv4Frame(stack4, 47), false, false, true, false},
		{"ARP for us", arpFrame(stack4), true, true, true, false},
		{"ARP for another host", arpFrame(other4), false, false, true, false},
		{"IPv6 TCP to us", ipv6Frame(stack6, protoTCP, nil), true, true, true, true},
		{"IPv6 TCP to another host", ipv6Frame(other6, protoTCP, nil), false, false, true, true},
		{"IPv6 UDP to us", ipv6Frame(stack6, protoUDP, nil), true, false, true, true},
		{"IPv6 echo request to us", ipv6Frame(stack6, protoICMPv6, []byte{128, 0, 0, 0}), true, false, true, true},
		{"neighbour solicitation for us", nsFrame(stack6), true, true, true, true},
		{"neighbour solicitation for another host", nsFrame(other6), false, false, true, true},
		{"neighbour advertisement to us", ipv6Frame(stack6, protoICMPv6, make([]byte, 24)), true, true, true, true},
		{"link suite frame", append(make([]byte, 12), 0x88, 0xb5, 1, 2, 3), false, false, true, false},
		{"truncated IPv4", ipv4Frame(stack4, protoTCP)[:ethHdrLen+10], false, false, true, false},
		{"truncated neighbour solicitation", nsFrame(stack6)[:ndpEnd-1], false, false, true, true},
	}
	// A stack with addresses of one family only: the program must still
	// load (the verifier rejects unreachable code) and pass the other
	// family's frames to the kernel.
	for _, family := range []string{"both", "IPv4 only", "IPv6 only"} {
		addrs := addrs
		switch family {
		case "IPv4 only":
			addrs = []netip.Prefix{addrs[0], addrs[2]}
		case "IPv6 only":
			addrs = addrs[1:2]
		}
		for _, filter := range []Filter{FilterStack, FilterTCP, FilterAll} {
			t.Run(family+"/"+filter.String(), func(t *testing.T) {
				insns, err := programInstructions(filter, addrs, asm.Instructions{asm.Mov.Imm(asm.R0, xdpTX), asm.Return()})
				require.NoError(t, err)
				prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, Instructions: insns, License: "Dual MIT/GPL"})
				require.NoError(t, err)
				defer prog.Close()
				for _, f := range frames {
					want := map[Filter]bool{FilterStack: f.stack, FilterTCP: f.tcp, FilterAll: f.all}[filter]
					if filter != FilterAll && (family == "IPv4 only" && f.v6 || family == "IPv6 only" && !f.v6) {
						want = false
					}
					// Test runs want a frame of at least the Ethernet header.
					ret, err := prog.Run(&ebpf.RunOptions{Data: append(f.frame, make([]byte, max(0, ethHdrLen-len(f.frame)))...)})
					require.NoError(t, err, f.name)
					assert.Equal(t, want, ret == xdpTX, "%s: verdict %d", f.name, ret)
				}
			})
		}
	}
}

func ethFrame(etherType uint16, payload []byte) []byte {
	b := make([]byte, ethHdrLen, ethHdrLen+len(payload))
	copy(b, []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2})
	binary.BigEndian.PutUint16(b[12:], etherType)
	return append(b, payload...)
}

func ipv4Frame(dst netip.Addr, proto uint8) []byte {
	ip := make([]byte, 40)
	ip[0], ip[9] = 0x45, proto
	binary.BigEndian.PutUint16(ip[2:], 40)
	copy(ip[12:], kernel4.AsSlice())
	copy(ip[16:], dst.AsSlice())
	return ethFrame(etherTypeIPv4, ip)
}

func arpFrame(target netip.Addr) []byte {
	arp := make([]byte, 28)
	binary.BigEndian.PutUint16(arp[0:], 1)
	binary.BigEndian.PutUint16(arp[2:], etherTypeIPv4)
	arp[4], arp[5] = 6, 4
	binary.BigEndian.PutUint16(arp[6:], 1)
	copy(arp[14:], kernel4.AsSlice())
	copy(arp[24:], target.AsSlice())
	return ethFrame(etherTypeARP, arp)
}

func ipv6Frame(dst netip.Addr, next uint8, l4 []byte) []byte {
	if l4 == nil {
		l4 = make([]byte, 20)
	}
	ip := make([]byte, 40, 40+len(l4))
	ip[0], ip[6], ip[7] = 0x60, next, 64
	binary.BigEndian.PutUint16(ip[4:], uint16(len(l4)))
	copy(ip[8:], kernel6.AsSlice())
	copy(ip[24:], dst.AsSlice())
	if next == protoICMPv6 && len(l4) >= 24 && l4[0] == 0 {
		l4[0] = icmpv6NA
	}
	return ethFrame(etherTypeIPv6, append(ip, l4...))
}

// nsFrame is a neighbour solicitation for target, sent to its
// solicited-node multicast group.
func nsFrame(target netip.Addr) []byte {
	t := target.As16()
	group := netip.AddrFrom16([16]byte{0xff, 0x02, 11: 1, 12: 0xff, 13: t[13], 14: t[14], 15: t[15]})
	ns := make([]byte, 24)
	ns[0] = icmpv6NS
	copy(ns[8:], t[:])
	return ipv6Frame(group, protoICMPv6, ns)
}
