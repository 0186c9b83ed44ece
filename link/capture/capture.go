// Package capture records the frames that cross a link.Link: a link
// decorator that shows every received and sent frame to a Recorder, and
// Recorders that keep frames in memory (Buffer) or write them as a pcap
// stream (Writer) that tcpdump, tshark and Wireshark read.
//
//	buf := capture.NewBuffer(capture.BufferConfig{Snaplen: 128})
//	st, err := polarnet.New(polarnet.Config{Link: capture.New(link, buf), ...})
//	...
//	buf.WriteFile("failure.pcap")
//
// Frames are recorded as the engine exchanges them with the link, like
// tcpdump on a host with offloads: with a link that has CapGSO a sent TCP
// frame may be up to 64 KiB long, and a frame sent with
// TxOffload.NeedsChecksum, or received marked ChecksumValid from the local
// kernel, may carry a partial checksum (the pseudo-header sum only).
// Packet.Offload and Packet.ChecksumValid say so.
//
// Received frames are recorded when the wrapped link's ReadBurst returns
// them, before the engine sees them; sent frames when the engine hands them
// to WriteBurst, before the wrapped link sends them (as tcpdump sees a
// host's frames before its driver), so that a capture never lags behind
// what the peers observe. A sent frame the wrapped link then refuses (its
// ring full) is in the capture nonetheless.
package capture

import (
	"time"

	"github.com/polarnet/polarnet/link"
)

// Direction says which way a frame crossed the link.
type Direction uint8

const (
	// In is a frame the link received (ReadBurst).
	In Direction = iota + 1
	// Out is a frame the engine sent (WriteBurst).
	Out
)

func (d Direction) String() string {
	switch d {
	case In:
		return "in"
	case Out:
		return "out"
	}
	return "?"
}

// Packet is one captured frame.
type Packet struct {
	Time time.Time
	Dir  Direction
	// Data is the frame, or its first bytes when it is longer than the
	// snap length. Passed to Recorder.Record it is only valid for the call.
	Data []byte
	// Len is the frame's full length.
	Len int
	// ChecksumValid is the received frame's flag (In only).
	ChecksumValid bool
	// Offload is what the engine asked of the link for this frame (Out
	// only).
	Offload link.TxOffload
}

// Recorder receives captured frames. Record may be called concurrently, by
// the poller for received frames and by writers for sent ones; it must
// copy what it keeps of p.Data, and return quickly: the link waits for it.
type Recorder interface {
	Record(p *Packet)
}

// Snapper is implemented by Recorders that keep only the first bytes of each
// frame: the link then gathers no more than Snaplen bytes of a sent frame.
type Snapper interface {
	Snaplen() int
}

// Link is a link.Link that shows every frame crossing the link it wraps
// to a Recorder. It passes frames through unchanged and advertises what the
// wrapped link does.
type Link struct {
	inner  link.Link
	rec    Recorder
	queues []link.Queue
}

var _ link.Link = (*Link)(nil)

// New wraps inner; rec receives its frames. The returned link owns inner:
// closing it closes inner.
func New(inner link.Link, rec Recorder) *Link {
	l := &Link{inner: inner, rec: rec}
	snap := inner.Info().RxFrameSize
	if s, ok := rec.(Snapper); ok && s.Snaplen() > 0 {
		snap = min(snap, s.Snaplen())
	}
	for _, q := range inner.Queues() {
		l.queues = append(l.queues, &queue{Queue: q, rec: rec, snap: snap, scratch: make([]byte, 0, snap)})
	}
	return l
}

// Info implements link.Link: the wrapped link's.
func (l *Link) Info() link.Info { return l.inner.Info() }

// Queues implements link.Link.
func (l *Link) Queues() []link.Queue { return l.queues }

// Close implements link.Link: it closes the wrapped link.
func (l *Link) Close() error { return l.inner.Close() }

// queue records the frames of one queue pair. WaitRead and Interrupt pass
// through (embedded).
type queue struct {
	link.Queue
	rec     Recorder
	snap    int    // bytes of a sent frame worth gathering
	scratch []byte // gathers a sent frame; WriteBurst has one caller at a time
	// One Packet per side, reused: the poller reads while another
	// goroutine may write.
	rxPkt, txPkt Packet
}

func (q *queue) ReadBurst(frames []link.RxFrame) (int, error) {
	n, err := q.Queue.ReadBurst(frames)
	if n > 0 {
		now := time.Now()
		for i := range frames[:n] {
			f := &frames[i]
			q.rxPkt = Packet{Time: now, Dir: In, Data: f.Buf[:f.Len], Len: f.Len, ChecksumValid: f.ChecksumValid}
			q.rec.Record(&q.rxPkt)
		}
		q.rxPkt.Data = nil
	}
	return n, err
}

func (q *queue) WriteBurst(frames []link.TxFrame) (int, error) {
	if len(frames) > 0 {
		now := time.Now()
		for i := range frames {
			f := &frames[i]
			q.scratch = q.scratch[:0]
			for _, s := range f.Segs {
				room := q.snap - len(q.scratch)
				q.scratch = append(q.scratch, s[:min(len(s), room)]...)
			}
			q.txPkt = Packet{Time: now, Dir: Out, Data: q.scratch, Len: f.Len(), Offload: f.Offload}
			q.rec.Record(&q.txPkt)
		}
		q.txPkt.Data = nil
	}
	return q.Queue.WriteBurst(frames)
}
