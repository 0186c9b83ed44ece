package capture

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// The classic pcap format (https://www.tcpdump.org/manpages/pcap-savefile.5.html)
// with nanosecond timestamps, written little-endian; readers detect the byte
// order from the magic number. It has no field for the direction, which the
// Ethernet addresses tell anyway.
const (
	pcapMagicNanos  = 0xa1b23c4d
	pcapMagicMicros = 0xa1b2c3d4
	linkTypeEther   = 1
	fileHeaderLen   = 24
	recordHeaderLen = 16
	// DefaultSnaplen keeps whole frames, the largest a TAP link with
	// offloads exchanges included.
	DefaultSnaplen = 262144
)

func pcapFileHeader(snaplen int) []byte {
	h := make([]byte, fileHeaderLen)
	binary.LittleEndian.PutUint32(h[0:], pcapMagicNanos)
	binary.LittleEndian.PutUint16(h[4:], 2) // version 2.4
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], uint32(snaplen))
	binary.LittleEndian.PutUint32(h[20:], linkTypeEther)
	return h
}

func appendRecord(b []byte, t time.Time, data []byte, origLen int) []byte {
	var h [recordHeaderLen]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(t.Unix()))
	binary.LittleEndian.PutUint32(h[4:], uint32(t.Nanosecond()))
	binary.LittleEndian.PutUint32(h[8:], uint32(len(data)))
	binary.LittleEndian.PutUint32(h[12:], uint32(origLen))
	return append(append(b, h[:]...), data...)
}

// Writer is a Recorder that writes frames to an io.Writer as a pcap stream.
// It is safe for concurrent use.
type Writer struct {
	mu      sync.Mutex
	w       *bufio.Writer
	snaplen int
	rec     []byte
	err     error
}

// NewWriter writes the pcap file header to w and returns a Writer that
// appends a record per frame, keeping at most snaplen bytes of each (zero:
// DefaultSnaplen). Call Flush before reading what w holds.
func NewWriter(w io.Writer, snaplen int) (*Writer, error) {
	if snaplen <= 0 {
		snaplen = DefaultSnaplen
	}
	pw := &Writer{w: bufio.NewWriter(w), snaplen: snaplen}
	if _, err := pw.w.Write(pcapFileHeader(snaplen)); err != nil {
		return nil, fmt.Errorf("capture: writing pcap header: %w", err)
	}
	return pw, nil
}

// Snaplen implements Snapper.
func (w *Writer) Snaplen() int { return w.snaplen }

// Record implements Recorder. The first write error is kept (see Flush) and
// later frames are dropped.
func (w *Writer) Record(p *Packet) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return
	}
	data := p.Data[:min(len(p.Data), w.snaplen)]
	w.rec = appendRecord(w.rec[:0], p.Time, data, p.Len)
	_, w.err = w.w.Write(w.rec)
}

// Flush writes out buffered records and returns the first error met.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = w.w.Flush()
	}
	return w.err
}

// BufferConfig configures a Buffer. The zero value keeps up to 100,000
// frames of up to DefaultSnaplen bytes.
type BufferConfig struct {
	// Snaplen is how many bytes of each frame are kept (zero:
	// DefaultSnaplen). Headers need 128 bytes at most with options.
	Snaplen int
	// Limit is how many frames are kept; later frames are counted in
	// Dropped but not kept (zero: 100,000).
	Limit int
}

// Buffer is a Recorder that keeps frames in memory, for tests that look at
// the frames and save them as pcap when they fail. It is safe for
// concurrent use.
type Buffer struct {
	cfg     BufferConfig
	mu      sync.Mutex
	pkts    []Packet
	dropped int
}

// NewBuffer returns an empty Buffer.
func NewBuffer(cfg BufferConfig) *Buffer {
	if cfg.Snaplen <= 0 {
		cfg.Snaplen = DefaultSnaplen
	}
	if cfg.Limit <= 0 {
		cfg.Limit = 100_000
	}
	return &Buffer{cfg: cfg}
}

// Snaplen implements Snapper.
func (b *Buffer) Snaplen() int { return b.cfg.Snaplen }

// Record implements Recorder.
func (b *Buffer) Record(p *Packet) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pkts) >= b.cfg.Limit {
		b.dropped++
		return
	}
	c := *p
	c.Data = append([]byte(nil), p.Data[:min(len(p.Data), b.cfg.Snaplen)]...)
	b.pkts = append(b.pkts, c)
}

// Packets returns the frames kept so far, oldest first. The slice is a
// copy; the packets' Data is shared and must not be modified.
func (b *Buffer) Packets() []Packet {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Packet(nil), b.pkts...)
}

// Dropped returns how many frames arrived after the buffer was full.
func (b *Buffer) Dropped() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped
}

// Reset forgets the frames kept so far.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pkts, b.dropped = nil, 0
}

// WriteTo writes the kept frames to w as a pcap stream.
func (b *Buffer) WriteTo(w io.Writer) (int64, error) {
	pkts := b.Packets()
	bw := bufio.NewWriter(w)
	n, err := bw.Write(pcapFileHeader(b.cfg.Snaplen))
	total := int64(n)
	var rec []byte
	for i := 0; err == nil && i < len(pkts); i++ {
		rec = appendRecord(rec[:0], pkts[i].Time, pkts[i].Data, pkts[i].Len)
		n, err = bw.Write(rec)
		total += int64(n)
	}
	if err == nil {
		err = bw.Flush()
	}
	return total, err
}

// WriteFile writes the kept frames to a pcap file at path.
func (b *Buffer) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = b.WriteTo(f)
	return errors.Join(err, f.Close())
}

// ReadPcap reads a pcap stream of Ethernet frames (either byte order,
// micro- or nanosecond timestamps). The packets' Dir is zero: pcap does not
// record it.
func ReadPcap(r io.Reader) ([]Packet, error) {
	br := bufio.NewReader(r)
	hdr := make([]byte, fileHeaderLen)
	if _, err := io.ReadFull(br, hdr); err != nil {
		return nil, fmt.Errorf("capture: reading pcap header: %w", err)
	}
	var order binary.ByteOrder = binary.LittleEndian
	nanos := false
	switch order.Uint32(hdr) {
	case pcapMagicNanos:
		nanos = true
	case pcapMagicMicros:
	default:
		order = binary.BigEndian
		switch order.Uint32(hdr) {
		case pcapMagicNanos:
			nanos = true
		case pcapMagicMicros:
		default:
			return nil, fmt.Errorf("capture: not a pcap stream (magic %#x)", binary.LittleEndian.Uint32(hdr))
		}
	}
	if lt := order.Uint32(hdr[20:]); lt != linkTypeEther {
		return nil, fmt.Errorf("capture: link type %d, want Ethernet (1)", lt)
	}
	snaplen := order.Uint32(hdr[16:])
	var pkts []Packet
	rec := make([]byte, recordHeaderLen)
	for {
		if _, err := io.ReadFull(br, rec); err == io.EOF {
			return pkts, nil
		} else if err != nil {
			return pkts, fmt.Errorf("capture: reading record %d: %w", len(pkts), err)
		}
		sec, frac := order.Uint32(rec[0:]), order.Uint32(rec[4:])
		incl, orig := order.Uint32(rec[8:]), order.Uint32(rec[12:])
		if incl > max(snaplen, DefaultSnaplen) {
			return pkts, fmt.Errorf("capture: record %d claims %d bytes", len(pkts), incl)
		}
		if !nanos {
			frac *= 1000
		}
		data := make([]byte, incl)
		if _, err := io.ReadFull(br, data); err != nil {
			return pkts, fmt.Errorf("capture: reading record %d: %w", len(pkts), err)
		}
		pkts = append(pkts, Packet{Time: time.Unix(int64(sec), int64(frac)), Data: data, Len: int(orig)})
	}
}
