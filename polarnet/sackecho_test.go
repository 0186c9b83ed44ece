package polarnet

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
)

// tsOption is two NOPs and a timestamp option of val and ecr.
func tsOption(val, ecr uint32) []byte {
	b := []byte{1, 1, 8, 10}
	b = binary.BigEndian.AppendUint32(b, val)
	return binary.BigEndian.AppendUint32(b, ecr)
}

// echoConn is a sackConn whose received ACKs go through the poller's
// sackEcho check.
type echoConn struct{ *sackConn }

// data sends 1000 bytes at seq with timestamp ts (none if 0).
func (c echoConn) data(seq, ts uint32) {
	var opts []byte
	if ts != 0 {
		opts = tsOption(ts, 40)
	}
	c.sendFrame(frame.TCPSpec{Src: c.src, Dst: c.dst, Seq: seq, Ack: 1, Flags: frame.FlagACK, Window: 1000, Options: opts, Payload: make([]byte, 1000)})
}

// ack passes an ACK from the peer with options opts through the check and
// returns the echo it leaves with.
func (c echoConn) ack(ack uint32, opts []byte) uint32 {
	c.t.Helper()
	f := frame.TCPFrame(frame.TCPSpec{Src: c.dst, Dst: c.src, Seq: 1, Ack: ack, Flags: frame.FlagACK, Window: 1000, Options: opts})
	h := parseRx(f)
	c.q.received(h, h.tcp(), true)
	p, ok := frame.Parse(f)
	require.True(c.t, ok)
	assert.True(c.t, frame.ChecksumOK(f, p), "TCP checksum")
	tcp, ok := frame.ParseTCP(f, p)
	require.True(c.t, ok)
	return tcp.Options.TSEcr
}

// sackEchoing is a timestamp echoing ecr and a SACK block above 1000.
func sackEchoing(ecr uint32) []byte {
	return append(tsOption(9, ecr), sackOption([2]uint32{2000, 3000})...)
}

// An ACK with SACK blocks that echoes a time before the flow's last
// retransmission leaves echoing that retransmission's timestamp; ACKs
// without SACK blocks, or echoing a later time, keep theirs.
func TestSACKEchoRaised(t *testing.T) {
	c := echoConn{newSACKConn(t, 0, false)}
	c.data(1000, 100)
	c.data(2000, 101)
	assert.Equal(t, uint32(100), c.ack(1000, sackEchoing(100)), "no retransmission yet")
	c.data(2000, 150) // a tail-loss probe
	assert.Equal(t, uint32(150), c.ack(1000, sackEchoing(100)), "the probe's SACK")
	assert.Equal(t, uint32(150), c.ack(1000, append(sackOption([2]uint32{2000, 3000}), tsOption(9, 100)...)), "the SACK option first")
	assert.Equal(t, uint32(100), c.ack(1000, tsOption(9, 100)), "no SACK blocks")
	assert.Equal(t, uint32(200), c.ack(1000, sackEchoing(200)), "a later echo")
	c.data(3000, 300)
	assert.Equal(t, uint32(150), c.ack(1000, sackEchoing(100)), "new data since")
}

// Flows that retransmitted nothing, or without timestamps, keep the echo.
func TestSACKEchoNeedsRetransmission(t *testing.T) {
	c := echoConn{newSACKConn(t, 0, false)}
	assert.Equal(t, uint32(5), c.ack(1000, sackEchoing(5)), "no data sent")
	c.data(1000, 0)
	c.data(1000, 0)
	assert.Equal(t, uint32(5), c.ack(1000, sackEchoing(5)), "a retransmission without timestamps")
}
