package tap

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/link"
)

// tunSetFilterEBPF is TUNSETFILTEREBPF, _IOR('T', 225, int), which x/sys/unix
// does not define. The device runs the program in its transmit path, in the
// context of whatever sent the frame, before the frame takes a place in the
// queue's ring: a frame the program drops costs the poller nothing.
const tunSetFilterEBPF = 0x800454e1

// shedder holds the state of the device's filter program: an array of
// 2×queues counters, queue q's shedding switch at q (0: off) and the
// connection requests it dropped at queues+q.
type shedder struct {
	state  *ebpf.Map
	queues int
}

// attachShedding loads the filter program that sheds connection requests
// (link.SYNShedder) and installs it on the device behind fd, every switch
// off. The device keeps its own reference to the program.
func attachShedding(fd int, name string, queues int) (*shedder, error) {
	state, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       "polarnet_shed",
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  8,
		MaxEntries: uint32(2 * queues),
	})
	if err != nil {
		return nil, fmt.Errorf("tap: creating the shedding map: %w", err)
	}
	prog, err := shedProgram(state, queues)
	if err != nil {
		state.Close()
		return nil, err
	}
	defer prog.Close()
	if err := unix.IoctlSetPointerInt(fd, tunSetFilterEBPF, prog.FD()); err != nil {
		state.Close()
		return nil, fmt.Errorf("tap: attaching the shedding program to %s: %w", name, err)
	}
	return &shedder{state: state, queues: queues}, nil
}

// shedProgram builds the filter: a TCP segment with SYN and without ACK
// that arrives for a queue whose switch is on is dropped and counted, but
// for one in link.ShedSample chosen at random; everything else passes
// whole (the program returns the frame's length). The queue is the one the
// steering program chose (skb->queue_mapping).
func shedProgram(state *ebpf.Map, queues int) (*ebpf.Program, error) {
	const (
		skbLen       = 0  // offsetof(struct __sk_buff, len)
		skbQueue     = 12 // offsetof(struct __sk_buff, queue_mapping)
		flagsSYNACK  = 0x12
		flagSYN      = 0x02
		keyOnStack   = -4
		tcpFlagsByte = 13
	)
	// lookup leaves in R0 a pointer to the counter at the key in R7, or 0.
	lookup := asm.Instructions{
		asm.StoreMem(asm.RFP, keyOnStack, asm.R7, asm.Word),
		asm.LoadMapPtr(asm.R1, state.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, keyOnStack),
		asm.FnMapLookupElem.Call(),
	}
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1), // the context, which packet loads read through
		asm.LoadMem(asm.R7, asm.R6, skbQueue, asm.Word),
	}
	insns = append(insns, lookup...)
	insns = append(insns,
		asm.JEq.Imm(asm.R0, 0, "keep"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.JEq.Imm(asm.R1, 0, "keep"),
	)
	// Packet loads return 0 from the program when the frame is too short:
	// such a frame is dropped, as the poller would drop it.
	insns = append(insns, tcpHeaderAt(asm.R8, "keep", "tcp")...)
	insns = append(insns,
		asm.LoadInd(asm.R0, asm.R8, eth+tcpFlagsByte, asm.Byte).WithSymbol("tcp"),
		asm.And.Imm(asm.R0, flagsSYNACK),
		asm.JNE.Imm(asm.R0, flagSYN, "keep"),
		asm.FnGetPrandomU32.Call(),
		asm.And.Imm(asm.R0, link.ShedSample-1),
		asm.JEq.Imm(asm.R0, 0, "keep"),

		// Count the drop at queues+queue.
		asm.Add.Imm(asm.R7, int32(queues)),
	)
	insns = append(insns, lookup...)
	insns = append(insns,
		asm.JEq.Imm(asm.R0, 0, "drop"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("drop"),
		asm.Return(),

		asm.LoadMem(asm.R0, asm.R6, skbLen, asm.Word).WithSymbol("keep"),
		asm.Return(),
	)
	return loadSocketFilter("polarnet_shed", "shedding", insns)
}

// set turns queue q's switch on or off.
func (s *shedder) set(q int, on bool) error {
	var v uint64
	if on {
		v = 1
	}
	return s.state.Update(uint32(q), v, ebpf.UpdateExist)
}

// dropped returns how many connection requests the program dropped for
// queue q.
func (s *shedder) dropped(q int) uint64 {
	var v uint64
	if err := s.state.Lookup(uint32(s.queues+q), &v); err != nil {
		return 0
	}
	return v
}

// ShedSYNs implements link.SYNShedder.
func (q *queue) ShedSYNs(on bool) error {
	s := q.link.shed
	if s == nil {
		return link.ErrNotSupported
	}
	if q.link.closed.Load() {
		return link.ErrClosed
	}
	return s.set(q.index, on)
}
