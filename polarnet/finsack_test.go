package polarnet

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/link"
)

// inFinWait1 stands for gVisor's answer when no stack is behind the queue:
// every FIN is sent from FIN_WAIT_1.
func inFinWait1(tcpip.NetworkProtocolNumber, flowKey) bool { return true }

var (
	local  = netip.MustParseAddrPort("198.18.0.2:40000")
	remote = netip.MustParseAddrPort("198.18.0.1:80")
	local6 = netip.MustParseAddrPort("[fd00:198:18::2]:40000")
	rem6   = netip.MustParseAddrPort("[fd00:198:18::1]:80")
)

var (
	sackPermitted = []byte{header.TCPOptionSACKPermitted, 2}
	// timestamps are the options of gVisor's pure ACKs on a connection
	// with timestamps: two NOPs and the option.
	timestamps = []byte{1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9}
)

// outgoing makes a packet of frame f as gVisor hands it to the queueing
// discipline: Ethernet, network and transport headers consumed.
func outgoing(t *testing.T, f []byte) *stack.PacketBuffer {
	t.Helper()
	p, ok := frame.Parse(f)
	require.True(t, ok)
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(f)})
	_, ok = pkt.LinkHeader().Consume(header.EthernetMinimumSize)
	require.True(t, ok)
	_, ok = pkt.NetworkHeader().Consume(p.L4 - p.L3)
	require.True(t, ok)
	_, ok = pkt.TransportHeader().Consume(int(f[p.L4+12]>>4) * 4)
	require.True(t, ok)
	pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
	if p.EtherType == frame.EtherTypeIPv6 {
		pkt.NetworkProtocolNumber = header.IPv6ProtocolNumber
	}
	pkt.TransportProtocolNumber = header.TCPProtocolNumber
	return pkt
}

// sackConn drives one connection through a TX queue: what it sends goes
// through the queue, what it receives to the queue's finSACK.
type sackConn struct {
	t         *testing.T
	q         *txQueue
	out       *recordingQueue
	src, dst  netip.AddrPort
	timestamp bool // pure ACKs carry timestamps
}

func newSACKConn(t *testing.T, caps link.Capabilities, v6 bool) *sackConn {
	out := &recordingQueue{}
	q := newTxQueue(out, caps, 1500, new(shardCounters), ACKConfig{DisableFilter: true}, newShardClock(func() {}), newFinSACK(), newClosedWindows(), inFinWait1)
	q.pollerAwake.Store(true)
	c := &sackConn{t: t, q: q, out: out, src: local, dst: remote}
	if v6 {
		c.src, c.dst = local6, rem6
	}
	return c
}

// send sends a segment and returns the frame that left.
func (c *sackConn) send(flags uint8, ack uint32, opts []byte) []byte {
	c.t.Helper()
	return c.sendFrame(frame.TCPSpec{Src: c.src, Dst: c.dst, Seq: 500, Ack: ack, Flags: flags, Window: 1000, Options: opts})
}

// sendFrame sends the segment spec describes through the queue and returns
// the frame that left, its checksum completed if the link was to.
func (c *sackConn) sendFrame(spec frame.TCPSpec) []byte {
	c.t.Helper()
	pkt := outgoing(c.t, frame.TCPFrame(spec))
	require.Nil(c.t, c.q.WritePacket(pkt))
	pkt.DecRef()
	c.q.flush()
	c.out.mu.Lock()
	defer c.out.mu.Unlock()
	require.NotEmpty(c.t, c.out.frames)
	f := c.out.frames[len(c.out.frames)-1]
	if off := c.out.offloads[len(c.out.offloads)-1]; off.NeedsChecksum {
		require.True(c.t, frame.CompletePartial(f, int(off.ChecksumStart), int(off.ChecksumOffset), len(f)))
	}
	return f
}

// ack sends a pure ACK and returns the TCP options it left with.
func (c *sackConn) ack(ack uint32) []byte {
	c.t.Helper()
	var opts []byte
	if c.timestamp {
		opts = timestamps
	}
	f := c.send(frame.FlagACK, ack, opts)
	p, ok := frame.Parse(f)
	require.True(c.t, ok)
	assert.True(c.t, frame.ChecksumOK(f, p), "TCP checksum")
	assert.True(c.t, frame.IPv4HeaderOK(f, p), "IPv4 header checksum")
	tcp, ok := frame.ParseTCP(f, p)
	require.True(c.t, ok)
	assert.Zero(c.t, tcp.PayloadLen)
	assert.Equal(c.t, uint32(ack), tcp.Ack)
	return f[p.L4+frame.TCPLen : p.L4+tcp.HeaderLen]
}

// receive hands the queue's finSACK a segment from the peer.
func (c *sackConn) receive(flags uint8, seq uint32, payload int, opts []byte) {
	c.t.Helper()
	f := frame.TCPFrame(frame.TCPSpec{Src: c.dst, Dst: c.src, Seq: seq, Ack: 501, Flags: flags, Window: 1000, Options: opts, Payload: make([]byte, payload)})
	if c.q.sacks.watching.Load() != 0 {
		c.q.sacks.received(parseRx(f), c.q.clock.now())
	}
}

// handshake opens the connection with SYN options ours and theirs, then
// sends our FIN acknowledging ack.
func (c *sackConn) handshake(ours, theirs []byte, ack uint32) {
	c.send(frame.FlagSYN, 0, ours)
	c.receive(frame.FlagSYN|frame.FlagACK, ack-1, 0, theirs)
	c.send(frame.FlagFIN|frame.FlagACK, ack, nil)
}

// sackOption returns the bytes of two NOPs and a SACK option of blocks.
func sackOption(blocks ...[2]uint32) []byte {
	b := []byte{1, 1, header.TCPOptionSACK, byte(2 + 8*len(blocks))}
	for _, x := range blocks {
		b = binary.BigEndian.AppendUint32(b, x[0])
		b = binary.BigEndian.AppendUint32(b, x[1])
	}
	return b
}

func TestFinSACKAddsBlocks(t *testing.T) {
	for _, tc := range []struct {
		name string
		caps link.Capabilities
		v6   bool
	}{
		{"full checksum", 0, false},
		{"partial checksum", link.CapTXChecksum, false},
		{"ipv6", 0, true},
		{"ipv6 partial checksum", link.CapTXChecksum, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newSACKConn(t, tc.caps, tc.v6)
			c.timestamp = true
			c.handshake(sackPermitted, sackPermitted, 1000)
			require.Equal(t, int32(1), c.q.sacks.closing.Load())

			assert.Equal(t, timestamps, c.ack(1000), "nothing received above the ACK")
			c.receive(frame.FlagACK, 2000, 100, nil)
			assert.Equal(t, append(timestamps, sackOption([2]uint32{2000, 2100})...), c.ack(1000))
			c.receive(frame.FlagACK, 3000, 100, nil)
			c.receive(frame.FlagACK, 2100, 100, nil) // joins the first block
			assert.Equal(t, append(timestamps, sackOption([2]uint32{2000, 2200}, [2]uint32{3000, 3100})...), c.ack(1000))
			c.receive(frame.FlagACK, 1500, 100, nil)
			c.receive(frame.FlagACK, 4000, 100, nil)
			// Three blocks fit beside timestamps, the most recent first.
			assert.Equal(t, append(timestamps, sackOption([2]uint32{4000, 4100}, [2]uint32{1500, 1600}, [2]uint32{2000, 2200})...), c.ack(1000))
			// The cumulative ACK drops the blocks it reaches.
			assert.Equal(t, append(timestamps, sackOption([2]uint32{4000, 4100}, [2]uint32{3000, 3100})...), c.ack(2200))
			c.receive(frame.FlagACK, 2200, 100, nil) // in order: no block
			assert.Equal(t, append(timestamps, sackOption([2]uint32{4000, 4100})...), c.ack(3100))
		})
	}
}

func TestFinSACKFourBlocksWithoutTimestamps(t *testing.T) {
	c := newSACKConn(t, 0, false)
	c.handshake(sackPermitted, sackPermitted, 1000)
	for _, seq := range []uint32{2000, 3000, 4000, 5000, 6000} {
		c.receive(frame.FlagACK, seq, 10, nil)
	}
	assert.Equal(t, sackOption([2]uint32{6000, 6010}, [2]uint32{5000, 5010}, [2]uint32{4000, 4010}, [2]uint32{3000, 3010}), c.ack(1000))
}

// TestFinSACKReportsEveryBlock receives a burst that opens more holes than
// an ACK reports, before any ACK leaves: the ACKs that follow report the
// blocks not reported yet after the most recent one.
func TestFinSACKReportsEveryBlock(t *testing.T) {
	c := newSACKConn(t, 0, false)
	c.timestamp = true
	c.handshake(sackPermitted, sackPermitted, 1000)
	for _, seq := range []uint32{2000, 3000, 4000, 5000, 6000} {
		c.receive(frame.FlagACK, seq, 10, nil)
	}
	b := func(seq uint32) [2]uint32 { return [2]uint32{seq, seq + 10} }
	assert.Equal(t, append(timestamps, sackOption(b(6000), b(5000), b(4000))...), c.ack(1000))
	assert.Equal(t, append(timestamps, sackOption(b(6000), b(3000), b(2000))...), c.ack(1000))
	assert.Equal(t, append(timestamps, sackOption(b(6000), b(5000), b(4000))...), c.ack(1000))
	c.receive(frame.FlagACK, 4010, 10, nil) // grows a reported block
	assert.Equal(t, append(timestamps, sackOption([2]uint32{4000, 4020}, b(6000), b(5000))...), c.ack(1000))
}

func TestFinSACKForgets(t *testing.T) {
	t.Run("peer FIN acknowledged", func(t *testing.T) {
		c := newSACKConn(t, 0, false)
		c.handshake(sackPermitted, sackPermitted, 1000)
		c.receive(frame.FlagACK|frame.FlagFIN, 2000, 100, nil)
		assert.Equal(t, sackOption([2]uint32{2000, 2100}), c.ack(1000))
		c.ack(2101)
		assert.Zero(t, c.q.sacks.closing.Load())
		assert.Zero(t, c.q.sacks.watching.Load())
		assert.Empty(t, c.q.sacks.watched)
	})
	t.Run("reset received", func(t *testing.T) {
		c := newSACKConn(t, 0, false)
		c.handshake(sackPermitted, sackPermitted, 1000)
		c.receive(frame.FlagRST, 1000, 0, nil)
		assert.Zero(t, c.q.sacks.closing.Load())
		assert.Empty(t, c.q.sacks.watched)
	})
	t.Run("reset sent", func(t *testing.T) {
		c := newSACKConn(t, 0, false)
		c.handshake(sackPermitted, sackPermitted, 1000)
		c.send(frame.FlagRST|frame.FlagACK, 1000, nil)
		assert.Zero(t, c.q.sacks.watching.Load())
		assert.Empty(t, c.q.sacks.watched)
	})
	t.Run("silent", func(t *testing.T) {
		c := newSACKConn(t, 0, false)
		c.handshake(sackPermitted, sackPermitted, 1000)
		c.q.sacks.mu.Lock()
		c.q.sacks.sweep(c.q.clock.now() + int64(finSACKIdle))
		c.q.sacks.mu.Unlock()
		assert.Zero(t, c.q.sacks.watching.Load())
		assert.Empty(t, c.q.sacks.watched)
	})
}

func TestFinSACKOnlyWhenNegotiated(t *testing.T) {
	for _, tc := range []struct {
		name         string
		ours, theirs []byte
	}{
		{"peer did not offer", sackPermitted, nil},
		{"we did not offer", nil, sackPermitted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newSACKConn(t, 0, false)
			c.handshake(tc.ours, tc.theirs, 1000)
			c.receive(frame.FlagACK, 2000, 100, nil)
			assert.Empty(t, c.ack(1000))
			assert.Zero(t, c.q.sacks.watching.Load())
			assert.Empty(t, c.q.sacks.watched)
			assert.Empty(t, c.q.sacks.open)
		})
	}
	t.Run("passive open", func(t *testing.T) {
		c := newSACKConn(t, 0, false)
		c.send(frame.FlagSYN|frame.FlagACK, 999, sackPermitted)
		assert.Zero(t, c.q.sacks.watching.Load(), "gVisor offers SACK only to a SYN that did")
		c.send(frame.FlagFIN|frame.FlagACK, 1000, nil)
		c.receive(frame.FlagACK, 2000, 100, nil)
		assert.Equal(t, sackOption([2]uint32{2000, 2100}), c.ack(1000))
	})
	t.Run("LAST_ACK", func(t *testing.T) {
		c := newSACKConn(t, 0, false)
		c.q.finWait = func(tcpip.NetworkProtocolNumber, flowKey) bool { return false }
		c.handshake(sackPermitted, sackPermitted, 1000)
		assert.Zero(t, c.q.sacks.watching.Load())
		assert.Zero(t, c.q.sacks.closing.Load())
	})
}

func TestFinSACKKeepsTheMostRecentBlocks(t *testing.T) {
	fl := &sackFlow{closing: true, ack: 1000, blocks: make([]sackRange, 0, maxFlowBlocks)}
	for i := range maxFlowBlocks + 1 {
		seq := seqnum.Value(2000 + 100*i)
		fl.received(header.SACKBlock{Start: seq, End: seq + 10})
	}
	require.Len(t, fl.blocks, maxFlowBlocks)
	assert.Equal(t, seqnum.Value(2000+100*maxFlowBlocks), fl.blocks[0].Start, "the most recent first")
	assert.Equal(t, seqnum.Value(2100), fl.blocks[maxFlowBlocks-1].Start, "the oldest gone")
}

// Data received in order, which gVisor has not acknowledged yet, is no
// hole: no block reports it, and one above a hole that fills goes too.
func TestFinSACKInOrderAheadOfTheACK(t *testing.T) {
	c := newSACKConn(t, 0, false)
	c.timestamp = true
	c.handshake(sackPermitted, sackPermitted, 1000)
	for _, seq := range []uint32{1000, 1100, 1200} {
		c.receive(frame.FlagACK, seq, 100, nil)
	}
	assert.Equal(t, timestamps, c.ack(1000), "in order, ahead of the ACK")
	c.receive(frame.FlagACK, 1400, 100, nil)
	assert.Equal(t, append(timestamps, sackOption([2]uint32{1400, 1500})...), c.ack(1100), "above the hole at 1300")
	c.receive(frame.FlagACK, 1300, 100, nil)
	assert.Equal(t, timestamps, c.ack(1200), "the hole filled")
}
