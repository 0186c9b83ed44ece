package tap

import (
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/link"
)

// tunSetSteeringEBPF is TUNSETSTEERINGEBPF, _IOR('T', 224, int), which
// x/sys/unix does not define.
const tunSetSteeringEBPF = 0x800454e0

// steeringProgram builds the socket filter the kernel runs to choose the
// queue of each frame it sends to the device: link.PortSteering for TCP
// (so each connection reaches the shard that owns it), queue 0 for anything
// else (UDP lives on shard 0; ARP and ICMP are answered wherever they land).
// It is assembled here because CI has no clang.
func steeringProgram(queues int) (*ebpf.Program, error) {
	// Legacy packet loads (LD_ABS/LD_IND) read the frame through R6 and
	// return 0 when the frame is too short, which we then steer to 0.
	insns := asm.Instructions{asm.Mov.Reg(asm.R6, asm.R1)}
	multiplier := uint32(link.PortSteeringMultiplier) // as the immediate's bits
	// Fragments are reassembled on shard 0; extension headers mean
	// software steering.
	insns = append(insns, tcpHeaderAt(asm.R7, "queue0", "ports")...)
	insns = append(insns,
		asm.LoadInd(asm.R0, asm.R7, eth, asm.Half).WithSymbol("ports"), // source port
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.LoadInd(asm.R0, asm.R7, eth+2, asm.Half), // destination port
		asm.Xor.Reg(asm.R0, asm.R8),
		// 32-bit ALU: the product wraps as PortSteering's uint32 does.
		asm.Mul.Imm32(asm.R0, int32(multiplier)),
		asm.RSh.Imm32(asm.R0, 16),
		asm.Mod.Imm(asm.R0, int32(queues)),
		asm.Return(),

		asm.Mov.Imm(asm.R0, 0).WithSymbol("queue0"),
		asm.Return(),
	)
	return loadSocketFilter("polarnet_steer", "steering", insns)
}

// Offsets and numbers the programs read frames by.
const (
	eth      = 14 // the Ethernet header's length
	ipv4     = 0x0800
	ipv6     = 0x86dd
	protoTCP = 6
)

// tcpHeaderAt reads a frame through R6 (the context) with legacy packet
// loads and leaves in dst the offset of its TCP header from its IP header,
// then jumps to found; a frame that is not a TCP segment of IPv4 (and not a
// fragment) or of IPv6 without extension headers jumps to other.
func tcpHeaderAt(dst asm.Register, other, found string) asm.Instructions {
	return asm.Instructions{
		asm.LoadAbs(12, asm.Half),
		asm.JEq.Imm(asm.R0, ipv4, "ipv4"),
		asm.JEq.Imm(asm.R0, ipv6, "ipv6"),
		asm.Ja.Label(other),

		asm.LoadAbs(eth+9, asm.Byte).WithSymbol("ipv4"),
		asm.JNE.Imm(asm.R0, protoTCP, other),
		asm.LoadAbs(eth+6, asm.Half), // flags and fragment offset
		asm.And.Imm(asm.R0, 0x3fff),
		asm.JNE.Imm(asm.R0, 0, other),
		asm.LoadAbs(eth, asm.Byte),
		asm.And.Imm(asm.R0, 0x0f),
		asm.LSh.Imm(asm.R0, 2), // IPv4 header length
		asm.Mov.Reg(dst, asm.R0),
		asm.Ja.Label(found),

		asm.LoadAbs(eth+6, asm.Byte).WithSymbol("ipv6"),
		asm.JNE.Imm(asm.R0, protoTCP, other),
		asm.Mov.Imm(dst, 40),
		asm.Ja.Label(found),
	}
}

// loadSocketFilter loads insns as a socket filter program, what a TAP
// device runs to steer and to filter the frames sent to it.
func loadSocketFilter(name, what string, insns asm.Instructions) (*ebpf.Program, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         name,
		Type:         ebpf.SocketFilter,
		License:      "GPL",
		Instructions: insns,
	})
	if err != nil {
		return nil, fmt.Errorf("tap: loading the %s program: %w", what, err)
	}
	return prog, nil
}

// attachSteering installs the steering program on the device behind fd.
// The device keeps its own reference to the program.
func attachSteering(fd int, name string, queues int) error {
	prog, err := steeringProgram(queues)
	if err != nil {
		return err
	}
	defer prog.Close()
	if err := unix.IoctlSetPointerInt(fd, tunSetSteeringEBPF, prog.FD()); err != nil {
		return fmt.Errorf("tap: attaching the steering program to %s: %w", name, err)
	}
	return nil
}

// RxQueue implements link.Steerer: with its steering program, the device
// delivers a TCP flow on link.PortSteering's queue. Without one (a single
// queue, or Config.DisableSteering) it returns -1: the kernel's own spread is
// not predictable, and the engine steers in software.
func (l *Link) RxQueue(local, remote netip.AddrPort) int {
	if !l.steered {
		return -1
	}
	return link.PortSteering(local.Port(), remote.Port(), len(l.queues))
}
