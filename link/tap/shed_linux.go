package tap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"unsafe"

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

// What a queue sheds: bits of its switch.
const (
	shedSYNs   = 1 << iota // connection requests (link.SYNShedder)
	shedStrays             // bare segments of flows not allowed (link.StrayShedder)
)

// allowCapacity is how many flows the allowed map holds; beyond it the
// kernel forgets the least recently used.
const allowCapacity = 1 << 16

// flowKey is a flow's key in the allowed map, as the program builds it
// from a frame the device receives: the remote address (IPv4 in the first
// four bytes, the rest zero), the remote port and the local port, in
// network byte order.
type flowKey [20]byte

func keyOf(f link.Flow) flowKey {
	var k flowKey
	copy(k[:16], f.Remote.Addr().Unmap().AsSlice())
	binary.BigEndian.PutUint16(k[16:], f.Remote.Port())
	binary.BigEndian.PutUint16(k[18:], f.Local.Port())
	return k
}

// shedder holds the state of the device's filter program: an array of
// 4×queues counters, queue q's switch at q (shedSYNs and shedStrays bits),
// the connection requests it dropped at queues+q, the stray segments at
// 2×queues+q and the frames it let through at 3×queues+q; and the allowed
// flows. The array is mapped into memory where the kernel allows it, so
// that a queue's poller reads its count of frames let through without a
// syscall (arrived).
type shedder struct {
	state   *ebpf.Map
	allowed *ebpf.Map
	queues  int
	mem     []byte // state mapped, or nil
}

// The counters' blocks in the state array.
const (
	slotSwitch = iota
	slotSYNsShed
	slotStraysShed
	slotPassed
	slots
)

// attachShedding loads the filter program that sheds connection requests
// and stray segments and installs it on the device behind fd, every switch
// off. The device keeps its own reference to the program.
func attachShedding(fd int, name string, queues int) (*shedder, error) {
	spec := &ebpf.MapSpec{
		Name:       "polarnet_shed",
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  8,
		MaxEntries: uint32(slots * queues),
		Flags:      unix.BPF_F_MMAPABLE,
	}
	state, err := ebpf.NewMap(spec)
	if err != nil {
		// Kernels before 5.5 map no arrays: shed without the count.
		spec.Flags = 0
		state, err = ebpf.NewMap(spec)
	}
	if err != nil {
		return nil, fmt.Errorf("tap: creating the shedding map: %w", err)
	}
	allowed, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       "polarnet_allow",
		Type:       ebpf.LRUHash,
		KeySize:    uint32(len(flowKey{})),
		ValueSize:  1,
		MaxEntries: allowCapacity,
	})
	if err != nil {
		state.Close()
		return nil, fmt.Errorf("tap: creating the allowed flows map: %w", err)
	}
	s := &shedder{state: state, allowed: allowed, queues: queues}
	// Without the mapping the queues read until EAGAIN, as they did before
	// the count existed.
	if spec.Flags != 0 {
		size := (slots*queues*8 + unix.Getpagesize() - 1) &^ (unix.Getpagesize() - 1)
		s.mem, _ = unix.Mmap(state.FD(), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	}
	prog, err := shedProgram(s)
	if err != nil {
		s.close()
		return nil, err
	}
	defer prog.Close()
	if err := unix.IoctlSetPointerInt(fd, tunSetFilterEBPF, prog.FD()); err != nil {
		s.close()
		return nil, fmt.Errorf("tap: attaching the shedding program to %s: %w", name, err)
	}
	return s, nil
}

// shedProgram builds the filter. For a queue whose switch has shedSYNs, a
// TCP segment with SYN and without ACK is dropped and counted; for one
// with shedStrays, so is an ACK without data, SYN, FIN or RST whose flow is
// not in the allowed map; each but for one in link.ShedSample chosen at
// random. Everything else passes whole (the program returns the frame's
// length) and is counted at 3×queues+queue. The queue is the one the
// steering program chose (skb->queue_mapping).
func shedProgram(s *shedder) (*ebpf.Program, error) {
	const (
		skbLen        = 0  // offsetof(struct __sk_buff, len)
		skbQueue      = 12 // offsetof(struct __sk_buff, queue_mapping)
		flagsSYNACK   = 0x12
		flagSYN       = 0x02
		flagACK       = 0x10
		flagsFINSYNRS = 0x07 // FIN, SYN, RST
		keyOnStack    = -4
		flowOnStack   = -32 // a flowKey, in three zeroed double words
		tcpOffByte    = 12
		tcpFlagsByte  = 13
	)
	// lookup leaves in R0 a pointer to the counter at the key in R7, or 0.
	lookup := asm.Instructions{
		asm.StoreMem(asm.RFP, keyOnStack, asm.R7, asm.Word),
		asm.LoadMapPtr(asm.R1, s.state.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, keyOnStack),
		asm.FnMapLookupElem.Call(),
	}
	// loadBytes copies n bytes of the frame from offset off (R2) to the
	// stack at to, or jumps to keep.
	loadBytes := func(to int16, n int32) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, int32(to)),
			asm.Mov.Imm(asm.R4, n),
			asm.FnSkbLoadBytes.Call(),
			asm.JNE.Imm(asm.R0, 0, "keep"),
		}
	}
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1), // the context, which packet loads read through
		asm.LoadMem(asm.R7, asm.R6, skbQueue, asm.Word),
	}
	insns = append(insns, lookup...)
	insns = append(insns,
		asm.JEq.Imm(asm.R0, 0, "keep"),
		asm.LoadMem(asm.R9, asm.R0, 0, asm.DWord), // the switch
		asm.JEq.Imm(asm.R9, 0, "keep"),
	)
	// Packet loads return 0 from the program when the frame is too short:
	// such a frame is dropped, as the poller would drop it.
	insns = append(insns, tcpHeaderAt(asm.R8, "keep", "tcp")...)
	insns = append(insns,
		asm.LoadInd(asm.R0, asm.R8, eth+tcpFlagsByte, asm.Byte).WithSymbol("tcp"),
		asm.Mov.Reg(asm.R1, asm.R0),
		asm.And.Imm(asm.R1, flagsSYNACK),
		asm.JEq.Imm(asm.R1, flagSYN, "request"),
		asm.Mov.Reg(asm.R1, asm.R0),
		asm.And.Imm(asm.R1, flagsFINSYNRS),
		asm.JNE.Imm(asm.R1, 0, "keep"),
		asm.And.Imm(asm.R0, flagACK),
		asm.JEq.Imm(asm.R0, 0, "keep"),
		asm.And.Imm(asm.R9, shedStrays),
		asm.JEq.Imm(asm.R9, 0, "keep"),

		// Without data the IP length is the IP and TCP headers'.
		asm.LoadInd(asm.R0, asm.R8, eth+tcpOffByte, asm.Byte),
		asm.RSh.Imm(asm.R0, 4),
		asm.LSh.Imm(asm.R0, 2),
		asm.Mov.Reg(asm.R9, asm.R0),
		asm.Add.Reg(asm.R9, asm.R8),
		asm.LoadAbs(12, asm.Half),
		asm.JEq.Imm(asm.R0, ipv6, "length6"),
		asm.LoadAbs(eth+2, asm.Half), // IPv4 total length
		asm.Ja.Label("length"),
		asm.LoadAbs(eth+4, asm.Half).WithSymbol("length6"), // IPv6 payload length
		asm.Add.Imm(asm.R0, 40),
		asm.JNE.Reg(asm.R0, asm.R9, "keep").WithSymbol("length"),

		// The flow's key, then whether it is allowed.
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.RFP, flowOnStack, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, flowOnStack+8, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, flowOnStack+16, asm.R1, asm.DWord),
		asm.LoadAbs(12, asm.Half),
		asm.JEq.Imm(asm.R0, ipv6, "source6"),
		asm.Mov.Imm(asm.R2, eth+12), // IPv4 source address
	)
	insns = append(insns, loadBytes(flowOnStack, 4)...)
	insns = append(insns, asm.Ja.Label("ports"),
		asm.Mov.Imm(asm.R2, eth+8).WithSymbol("source6"))
	insns = append(insns, loadBytes(flowOnStack, 16)...)
	insns = append(insns,
		asm.Mov.Reg(asm.R2, asm.R8).WithSymbol("ports"),
		asm.Add.Imm(asm.R2, eth),
	)
	insns = append(insns, loadBytes(flowOnStack+16, 4)...)
	insns = append(insns,
		asm.LoadMapPtr(asm.R1, s.allowed.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, flowOnStack),
		asm.FnMapLookupElem.Call(),
		asm.JNE.Imm(asm.R0, 0, "keep"),
		// A stray's drop counts at 2×queues+queue.
		asm.Add.Imm(asm.R7, int32(slotStraysShed*s.queues)),
		asm.Ja.Label("sample"),

		asm.And.Imm(asm.R9, shedSYNs).WithSymbol("request"),
		asm.JEq.Imm(asm.R9, 0, "keep"),
		// A connection request's at queues+queue.
		asm.Add.Imm(asm.R7, int32(slotSYNsShed*s.queues)),

		asm.FnGetPrandomU32.Call().WithSymbol("sample"),
		asm.And.Imm(asm.R0, link.ShedSample-1),
		asm.JEq.Imm(asm.R0, 0, "keep"),
	)
	// count adds one to the counter at the key in R7, then goes on at next.
	count := func(next string) asm.Instructions {
		return slices.Concat(lookup, asm.Instructions{
			asm.JEq.Imm(asm.R0, 0, next),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		})
	}
	insns = append(insns, count("drop")...)
	insns = append(insns,
		asm.Mov.Imm(asm.R0, 0).WithSymbol("drop"),
		asm.Return(),

		// The sample's path has moved the key: load the queue again.
		asm.LoadMem(asm.R7, asm.R6, skbQueue, asm.Word).WithSymbol("keep"),
		asm.Add.Imm(asm.R7, int32(slotPassed*s.queues)),
	)
	insns = append(insns, count("passed")...)
	insns = append(insns,
		asm.LoadMem(asm.R0, asm.R6, skbLen, asm.Word).WithSymbol("passed"),
		asm.Return(),
	)
	return loadSocketFilter("polarnet_shed", "shedding", insns)
}

// set turns what queue q sheds on or off. Only q's poller and Close write
// its switch.
func (s *shedder) set(q int, what uint64, on bool) error {
	var v uint64
	key := uint32(slotSwitch*s.queues + q)
	if err := s.state.Lookup(key, &v); err != nil {
		return err
	}
	if on {
		v |= what
	} else {
		v &^= what
	}
	return s.state.Update(key, v, ebpf.UpdateExist)
}

// allow adds flows to the allowed map.
func (s *shedder) allow(flows []link.Flow) error {
	if len(flows) == 0 {
		return nil
	}
	keys := make([]flowKey, len(flows))
	for i, f := range flows {
		keys[i] = keyOf(f)
	}
	_, err := s.allowed.BatchUpdate(keys, make([]uint8, len(keys)), nil)
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	for _, k := range keys {
		if err := s.allowed.Update(k, uint8(0), ebpf.UpdateAny); err != nil {
			return err
		}
	}
	return nil
}

// dropped returns how many frames the program dropped for queue q: what
// shedding, shedSYNs or shedStrays or both.
func (s *shedder) dropped(q int, what uint64) uint64 {
	var n uint64
	for i, bit := range []uint64{shedSYNs, shedStrays} {
		var v uint64
		if what&bit != 0 && s.state.Lookup(uint32((slotSYNsShed+i)*s.queues+q), &v) == nil {
			n += v
		}
	}
	return n
}

// arrived returns queue q's count of frames let through, in memory the
// kernel writes, or nil when the state is not mapped. It stays valid until
// close.
func (s *shedder) arrived(q int) *uint64 {
	if s == nil || s.mem == nil {
		return nil
	}
	return (*uint64)(unsafe.Pointer(&s.mem[(slotPassed*s.queues+q)*8]))
}

// close turns every switch off and lets go of the maps. A persistent
// device keeps the program, which reads the maps through its own
// references. The queues must be closed: their pollers read the mapping.
func (s *shedder) close() {
	for q := range s.queues {
		s.state.Update(uint32(slotSwitch*s.queues+q), uint64(0), ebpf.UpdateExist)
	}
	if s.mem != nil {
		unix.Munmap(s.mem)
	}
	s.state.Close()
	s.allowed.Close()
}

// ShedSYNs implements link.SYNShedder.
func (q *queue) ShedSYNs(on bool) error { return q.shed(shedSYNs, on) }

// ShedStrays implements link.StrayShedder.
func (q *queue) ShedStrays(on bool) error { return q.shed(shedStrays, on) }

// SYNsShed implements link.SYNShedder.
func (q *queue) SYNsShed() uint64 { return q.dropped(shedSYNs) }

// StraysShed implements link.StrayShedder.
func (q *queue) StraysShed() uint64 { return q.dropped(shedStrays) }

func (q *queue) dropped(what uint64) uint64 {
	if s, err := q.shedder(); err == nil {
		return s.dropped(q.index, what)
	}
	return 0
}

// AllowFlows implements link.StrayShedder.
func (q *queue) AllowFlows(flows []link.Flow) error {
	s, err := q.shedder()
	if err != nil {
		return err
	}
	return s.allow(flows)
}

func (q *queue) shed(what uint64, on bool) error {
	s, err := q.shedder()
	if err != nil {
		return err
	}
	return s.set(q.index, what, on)
}

// shedder returns the link's shedder, or why the queue cannot shed.
func (q *queue) shedder() (*shedder, error) {
	switch {
	case q.link.shed == nil:
		return nil, link.ErrNotSupported
	case q.link.closed.Load():
		return nil, link.ErrClosed
	}
	return q.link.shed, nil
}
