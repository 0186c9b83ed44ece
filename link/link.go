package link

import (
	"errors"
	"net"
)

// Link is a network device the engine drives: one or more queue pairs that
// share a MAC address and an MTU. The engine adapts each queue pair to a
// gVisor NIC of its own shard.
//
// A Link is owned by the polarnet.Stack it is given to: Stack.Close closes it.
type Link interface {
	// Info describes the device. It must not change after the link is opened.
	Info() Info
	// Queues returns the queue pairs. The engine runs one shard per queue
	// pair, so the slice must not change after the link is opened.
	Queues() []Queue
	// Close releases the device. Later calls on its queues return
	// ErrClosed (a ReadBurst already running may still return frames);
	// a blocked WaitRead returns at once. Closing twice returns nil or an
	// error matching net.ErrClosed.
	Close() error
}

// Info describes a link.
type Info struct {
	// Name is the device name (for logs and stats), e.g. "tap0".
	Name string
	// MAC is the Ethernet address frames are sent from.
	MAC net.HardwareAddr
	// MTU is the largest IP packet the link carries in one frame (the
	// Ethernet header not included), e.g. 1500.
	MTU int
	// RxFrameSize is the capacity every RxFrame.Buf must have: the largest
	// frame ReadBurst can return, Ethernet header included. Links that
	// receive coalesced (GRO) frames set it above MTU+14.
	RxFrameSize int
	// Caps lists the offloads the link performs.
	Caps Capabilities
	// GSOMaxSize is the largest TCP frame (Ethernet, IP and TCP headers
	// included) the link segments itself when Caps has CapGSO.
	GSOMaxSize int
}

// Capabilities are offloads a link performs for the engine.
type Capabilities uint32

const (
	// CapRXChecksum: the link marks frames whose transport checksum it has
	// verified (or that never crossed a wire) with RxFrame.ChecksumValid.
	// The engine verifies the others in software.
	CapRXChecksum Capabilities = 1 << iota
	// CapTXChecksum: the link completes checksums of frames whose
	// TxOffload.NeedsChecksum is set (Linux CHECKSUM_PARTIAL semantics).
	CapTXChecksum
	// CapGSO: the link segments TCP frames larger than the MTU that carry
	// TxOffload.GSO (TSO, or host GSO for TAP).
	CapGSO
)

// Queue is one queue pair of a link: an RX ring and a TX ring served by one
// shard's poller. ReadBurst and WaitRead are only called from that poller;
// WriteBurst is called by one goroutine at a time (the engine serialises TX
// per queue), not necessarily the poller's.
type Queue interface {
	// ReadBurst receives up to len(frames) frames without blocking and
	// returns how many it filled; 0 and a nil error when nothing is pending.
	// Frames [0, n) are valid even when it also returns an error. Frames
	// arrive first in, first out per queue.
	//
	// Buffers: the engine owns frames[i].Buf (capacity at least
	// Info.RxFrameSize) and lends it for the call. The link writes frame
	// i into frames[i].Buf[:frames[i].Len] — syscall links read straight
	// into it, memory-mapped links copy from their ring and recycle their
	// own frame before returning. Nothing the link owns outlives the call,
	// so no frame is ever copied twice. The link fills Buf, never replaces it.
	ReadBurst(frames []RxFrame) (int, error)

	// WriteBurst transmits frames and returns how many the link accepted,
	// in order. Fewer than len(frames) with a nil error means the ring is
	// full: the engine keeps the rest for its next flush (within a bound,
	// then counts them as dropped) and stays awake for them. An error
	// reports frames the link cannot send now (carrier down, device gone)
	// or ever (malformed), or ErrClosed; the engine counts the rest as
	// errors and TCP retransmits them. A link that is down must say so
	// with an error, or the engine retries it in a busy loop.
	//
	// Buffers: frames[i].Segs is the frame as a gather list owned by the
	// engine and valid only for the call: the link writes it out (writev) or
	// copies it into its own buffers before returning.
	WriteBurst(frames []TxFrame) (int, error)

	// WaitRead blocks until the RX ring may hold frames, Interrupt is called,
	// or the link is closed (then it returns ErrClosed). It may return
	// early; the caller reads again. It must return at once while frames
	// are queued but unread, even if none arrived since the last wakeup
	// (edge-triggered notifications make this easy to get wrong). Other
	// errors (a deleted device) are counted by the engine, which backs off
	// and waits again. Waits must park the goroutine in the
	// Go netpoller (or on a channel), never in a raw blocking syscall.
	WaitRead() error

	// Interrupt makes a WaitRead in progress, or the next one, return.
	// It may be called from any goroutine.
	Interrupt()
}

// RxFrame is one received Ethernet frame.
type RxFrame struct {
	// Buf is the engine's buffer the link writes the frame into.
	Buf []byte
	// Len is the frame's length in Buf, set by the link.
	Len int
	// ChecksumValid reports that the transport checksum was verified by the
	// link, or need not be: a CHECKSUM_PARTIAL frame from the local kernel,
	// whose checksum field holds only the pseudo-header sum. The engine
	// neither checks such a frame again nor forwards it.
	ChecksumValid bool
}

// TxFrame is one Ethernet frame to send.
type TxFrame struct {
	// Segs holds the frame's bytes, in order, as a gather list.
	Segs [][]byte
	// Offload asks the link for checksum completion and segmentation.
	Offload TxOffload
}

// Len returns the frame's total length.
func (f *TxFrame) Len() int {
	n := 0
	for _, s := range f.Segs {
		n += len(s)
	}
	return n
}

// GSOKind says how a link should segment a TCP frame.
type GSOKind uint8

const (
	GSONone GSOKind = iota
	GSOTCPv4
	GSOTCPv6
)

// TxOffload is per-frame offload metadata, with the meaning virtio-net and
// Linux give it: with NeedsChecksum the transport checksum field holds the
// pseudo-header sum and the link adds the one's complement sum of the bytes
// from ChecksumStart to the end and stores it at ChecksumStart+ChecksumOffset
// (offsets from the start of the Ethernet frame).
type TxOffload struct {
	NeedsChecksum  bool
	ChecksumStart  uint16
	ChecksumOffset uint16
	GSO            GSOKind
	// GSOSize is the MSS to cut the payload into.
	GSOSize uint16
	// HeaderLen is the length of the Ethernet, IP and TCP headers.
	HeaderLen uint16
}

// ErrClosed is returned by queue operations after the link is closed.
// It wraps net.ErrClosed so errors.Is(err, net.ErrClosed) holds.
var ErrClosed = &closedError{}

type closedError struct{}

func (*closedError) Error() string        { return "polarnet: link closed" }
func (*closedError) Is(target error) bool { return target == net.ErrClosed }

// ErrNotSupported is returned when a link or feature is not available in this
// build or on this host. Errors from links wrap it with the reason.
var ErrNotSupported = errors.New("polarnet: not supported")
