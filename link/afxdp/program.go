package afxdp

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf/asm"
)

// The XDP program is assembled here rather than compiled from C: CI has no
// clang, and what it does is short. For each frame it decides, from the
// Ethernet, ARP, IPv4 and IPv6 headers and the link's addresses (compiled in
// as constants), whether the link takes it; if so it redirects the frame to
// the AF_XDP socket of the RX queue the frame arrived on, and otherwise, or
// when that queue has no socket, it passes the frame to the kernel.

// XDP actions and offsets of struct xdp_md.
const (
	xdpPass         = 2
	xdpMdData       = 0
	xdpMdDataEnd    = 4
	xdpMdRxQueueIdx = 16
)

// Frame offsets the program reads.
const (
	offEtherType   = 12
	offARPTarget   = ethHdrLen + 24 // target protocol address
	arpEnd         = ethHdrLen + 28
	offIPv4Proto   = ethHdrLen + 9
	offIPv4Dst     = ethHdrLen + 16
	ipv4End        = ethHdrLen + 20
	offIPv6Next    = ethHdrLen + 6
	offIPv6Dst     = ethHdrLen + 24
	ipv6End        = ethHdrLen + 40
	offICMPv6Type  = ipv6End
	offNDPTarget   = ipv6End + 8
	ndpEnd         = offNDPTarget + 16
	icmpv6NS       = 135
	icmpv6NA       = 136
	protoICMP      = 1
	protoTCP       = 6
	protoUDP       = 17
	protoICMPv6    = 58
	etherTypeIPv4  = 0x0800
	etherTypeARP   = 0x0806
	etherTypeIPv6  = 0x86DD
	programNameLen = 15 // BPF_OBJ_NAME_LEN less the NUL
)

// Registers: r6 holds the context, r2 the frame's start, r3 its end, r4 and
// r5 are scratch.
const (
	rCtx   = asm.R6
	rData  = asm.R2
	rEnd   = asm.R3
	rTmp   = asm.R4
	rValue = asm.R5
)

// programInstructions returns the program for filter and addrs. redirect is
// the code run for a frame the link takes, which must end the program; the
// link's is redirectToQueue, tests substitute an exit code of their own.
func programInstructions(filter Filter, addrs []netip.Prefix, redirect asm.Instructions) (asm.Instructions, error) {
	if len(redirect) == 0 {
		return nil, fmt.Errorf("afxdp: empty redirect code")
	}
	var v4, v6 []netip.Addr
	for _, p := range addrs {
		if a := p.Addr().Unmap(); a.Is4() {
			v4 = append(v4, a)
		} else {
			v6 = append(v6, a)
		}
	}
	insns := asm.Instructions{
		asm.Mov.Reg(rCtx, asm.R1),
	}
	if filter == FilterAll {
		return append(insns, redirect...), nil
	}
	insns = append(insns,
		asm.LoadMem(rData, rCtx, xdpMdData, asm.Word),
		asm.LoadMem(rEnd, rCtx, xdpMdDataEnd, asm.Word),
	)
	insns = append(insns, boundsCheck(ethHdrLen)...)
	// A family without addresses goes to the kernel whole, and its code is
	// left out: the verifier rejects code that nothing jumps to.
	insns = append(insns, asm.LoadMem(rValue, rData, offEtherType, asm.Half))
	if len(v4) > 0 {
		insns = append(insns,
			asm.JEq.Imm32(rValue, int32(nativeUint16(etherTypeIPv4)), "ipv4"),
			asm.JEq.Imm32(rValue, int32(nativeUint16(etherTypeARP)), "arp"),
		)
	}
	if len(v6) > 0 {
		insns = append(insns, asm.JEq.Imm32(rValue, int32(nativeUint16(etherTypeIPv6)), "ipv6"))
	}
	insns = append(insns, asm.Ja.Label("pass"))
	if len(v4) > 0 {
		insns = append(insns, ipv4Instructions(filter, v4)...)
	}
	if len(v6) > 0 {
		insns = append(insns, ipv6Instructions(filter, v6)...)
	}
	insns = append(insns,
		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
		asm.Return(),
	)
	redirect = append(asm.Instructions(nil), redirect...)
	redirect[0] = redirect[0].WithSymbol("redirect")
	return append(insns, redirect...), nil
}

// ipv4Instructions are the "arp" and "ipv4" blocks of the program, for
// addresses v4 (at least one); they end in jumps to "redirect" or "pass".
func ipv4Instructions(filter Filter, v4 []netip.Addr) asm.Instructions {
	var insns asm.Instructions
	// ARP: requests for one of our IPv4 addresses and replies to us.
	arp := boundsCheck(arpEnd)
	arp[0] = arp[0].WithSymbol("arp")
	insns = append(insns, arp...)
	insns = append(insns, matchAddrs(offARPTarget, v4, "redirect")...)
	insns = append(insns, asm.Ja.Label("pass"))

	// IPv4: TCP (and UDP and ICMP with FilterStack) to our addresses.
	// Fragments after the first carry no transport header but are the
	// stack's all the same, and are redirected too.
	ipv4 := boundsCheck(ipv4End)
	ipv4[0] = ipv4[0].WithSymbol("ipv4")
	insns = append(insns, ipv4...)
	insns = append(insns, matchAddrs(offIPv4Dst, v4, "ipv4-ours")...)
	insns = append(insns, asm.Ja.Label("pass"))
	insns = append(insns, asm.LoadMem(rValue, rData, offIPv4Proto, asm.Byte).WithSymbol("ipv4-ours"))
	insns = append(insns, asm.JEq.Imm32(rValue, protoTCP, "redirect"))
	if filter == FilterStack {
		insns = append(insns,
			asm.JEq.Imm32(rValue, protoUDP, "redirect"),
			asm.JEq.Imm32(rValue, protoICMP, "redirect"),
		)
	}
	return append(insns, asm.Ja.Label("pass"))
}

// ipv6Instructions is the "ipv6" block of the program, for addresses v6
// (at least one); it ends in jumps to "redirect" or "pass".
func ipv6Instructions(filter Filter, v6 []netip.Addr) asm.Instructions {
	// IPv6: TCP (and UDP and ICMPv6 with FilterStack) to our addresses,
	// neighbour discovery for them with either filter. A neighbour
	// solicitation is addressed to a solicited-node multicast group, which
	// other hosts' addresses share: its target address decides.
	insns := boundsCheck(ipv6End)
	insns[0] = insns[0].WithSymbol("ipv6")
	insns = append(insns, asm.LoadMem(asm.R1, rData, offIPv6Next, asm.Byte))
	insns = append(insns, matchAddrs(offIPv6Dst, v6, "ipv6-ours")...)
	// Not to us: a neighbour solicitation for one of our addresses?
	insns = append(insns, asm.JNE.Imm32(asm.R1, protoICMPv6, "pass"))
	insns = append(insns, boundsCheck(ndpEnd)...)
	insns = append(insns,
		asm.LoadMem(rValue, rData, offICMPv6Type, asm.Byte),
		asm.JNE.Imm32(rValue, icmpv6NS, "pass"),
	)
	insns = append(insns, matchAddrs(offNDPTarget, v6, "redirect")...)
	insns = append(insns, asm.Ja.Label("pass"))
	insns = append(insns, asm.JEq.Imm32(asm.R1, protoTCP, "redirect").WithSymbol("ipv6-ours"))
	if filter == FilterStack {
		insns = append(insns,
			asm.JEq.Imm32(asm.R1, protoUDP, "redirect"),
			asm.JEq.Imm32(asm.R1, protoICMPv6, "redirect"),
		)
	} else {
		// FilterTCP: neighbour discovery only, of all ICMPv6.
		insns = append(insns, asm.JNE.Imm32(asm.R1, protoICMPv6, "pass"))
		insns = append(insns, boundsCheck(offICMPv6Type+1)...)
		insns = append(insns,
			asm.LoadMem(rValue, rData, offICMPv6Type, asm.Byte),
			asm.JEq.Imm32(rValue, icmpv6NS, "redirect"),
			asm.JEq.Imm32(rValue, icmpv6NA, "redirect"),
		)
	}
	return append(insns, asm.Ja.Label("pass"))
}

// redirectToQueue redirects the frame to the socket in xsks at the frame's
// RX queue, or passes it to the kernel when that entry is empty. An AF_XDP
// socket in copy or driver mode receives only from the queue it is bound to,
// so no other entry would do.
func redirectToQueue(xsksFD int) asm.Instructions {
	return asm.Instructions{
		asm.LoadMapPtr(asm.R1, xsksFD),
		asm.LoadMem(asm.R2, rCtx, xdpMdRxQueueIdx, asm.Word),
		asm.Mov.Imm(asm.R3, xdpPass), // the action when the entry is empty
		asm.FnRedirectMap.Call(),
		asm.Return(),
	}
}

// boundsCheck jumps to "pass" unless the frame has at least n bytes.
func boundsCheck(n int) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(rTmp, rData),
		asm.Add.Imm(rTmp, int32(n)),
		asm.JGT.Reg(rTmp, rEnd, "pass"),
	}
}

// matchAddrs jumps to label if the address at frame offset off (4 bytes for
// IPv4, 16 for IPv6; the caller has checked the bounds) is one of addrs,
// and falls through otherwise. The addresses are compared as 32-bit words
// in the host's byte order, as the program loads them.
func matchAddrs(off int, addrs []netip.Addr, label string) asm.Instructions {
	var insns asm.Instructions
	for i, a := range addrs {
		b := a.AsSlice()
		next := fmt.Sprintf("next-%d-%d-%s", off, i, label)
		for w := 0; w < len(b); w += 4 {
			insns = append(insns, asm.LoadMem(rValue, rData, int16(off+w), asm.Word))
			want := int32(binary.NativeEndian.Uint32(b[w:]))
			if w+4 < len(b) {
				insns = append(insns, asm.JNE.Imm32(rValue, want, next))
			} else {
				insns = append(insns, asm.JEq.Imm32(rValue, want, label))
			}
		}
		// The next address's code (or what follows) starts here.
		insns = append(insns, asm.Mov.Reg(rValue, rValue).WithSymbol(next))
	}
	return insns
}

// nativeUint16 is the value the program reads for the big-endian v.
func nativeUint16(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}
