package reliability

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/internal/kpeer"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/capture"
)

// TestInjectionFloods floods an established connection, which streams data
// from the stack to a kernel peer, with segments forged on its 4-tuple as
// fast as the kernel side sends them, one kind after another: RSTs in and
// out of the receive window (never the exact RCV.NXT), ACKs out of the
// window, ACKs whose acknowledgment is too new or too old, SYNs, and
// duplicate ACKs carrying tiny SACK blocks for data the peer never got
// (SACK-scoreboard abuse). RFC 5961 says none of them may end or corrupt
// the connection: after each flood the stream moves again, at the end
// every byte arrived (SHA-256) and the peer's answer reaches the stack's
// end, and the heap a flood leaves behind is bounded. Throughput under each
// flood against the unloaded stream is logged, not asserted.
func TestInjectionFloods(t *testing.T) {
	const heapBound = 32 << 20
	watch := new(flowWatch)
	e := newEnv(t, taptopo.Options{Wrap: func(l link.Link) link.Link { return capture.New(l, watch) }})
	c, k := e.dial(t, kpeer.Listen(t, e.NS, kernel4))
	src, dst := k.LocalAddr().(*net.TCPAddr).AddrPort(), c.LocalAddr().(*net.TCPAddr).AddrPort()
	watch.watch(dst.Port())
	s := startStream(c, k, 3, pace{})
	rates(floodWindow/2, s) // out of slow start
	base := rates(floodWindow, s)[0]
	watch.waitSeen(t)
	t.Logf("unloaded: stack→kernel %s/s", mib(uint64(base)))
	raw := e.raw(t)
	rng := rand.New(rand.NewPCG(3, 4))

	for _, tc := range []struct {
		name  string
		forge func(w flowState) frame.TCPSpec
	}{
		{"RST in and out of window", func(w flowState) frame.TCPSpec {
			// Half land within 32 KiB past RCV.NXT (in the window: a
			// challenge ACK), half anywhere else; never on RCV.NXT.
			off := rng.Uint32N(math.MaxUint32)
			if rng.IntN(2) == 0 {
				off = rng.Uint32N(32 << 10)
			}
			return frame.TCPSpec{Seq: w.peerNxt + 1 + off, Flags: frame.FlagRST}
		}},
		{"ACK out of window", func(w flowState) frame.TCPSpec {
			return frame.TCPSpec{Seq: w.peerNxt + 1<<30 + rng.Uint32N(1<<30), Ack: rng.Uint32(), Flags: frame.FlagACK,
				Window: w.peerWnd, Options: timestamps(w)}
		}},
		{"ACK with unacceptable acknowledgment", func(w flowState) frame.TCPSpec {
			// Beyond SND.NXT, or before SND.UNA by more than any window.
			ack := w.sndNxt + 1<<30 + rng.Uint32N(1<<29)
			if rng.IntN(2) == 0 {
				ack = w.peerAck - 1<<30 - rng.Uint32N(1<<29)
			}
			return frame.TCPSpec{Seq: w.peerNxt, Ack: ack, Flags: frame.FlagACK, Window: w.peerWnd, Options: timestamps(w)}
		}},
		{"SYN on the connection", func(w flowState) frame.TCPSpec {
			return frame.TCPSpec{Seq: rng.Uint32(), Flags: frame.FlagSYN, Window: 64240, Options: frame.MSSOption(1460)}
		}},
		{"SACK blocks for data never received", func(w flowState) frame.TCPSpec {
			return frame.TCPSpec{Seq: w.peerNxt, Ack: w.peerAck, Flags: frame.FlagACK, Window: w.peerWnd,
				Options: append(timestamps(w), sackBlocks(rng, w.peerAck, w.sndNxt)...)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, statsBefore := liveHeap(), e.Stack.Stats().Total
			heap := sampleHeap()
			f := startFlood(raw, math.MaxInt, 0, func() []byte {
				spec := tc.forge(watch.state())
				spec.Src, spec.Dst = src, dst
				return e.forge(spec)
			})
			loaded := rates(floodWindow, s)[0]
			sent, rate, err := f.stop()
			peak := heap.finish()
			retained := int64(liveHeap()) - int64(before)
			stats := e.Stack.Stats().Total
			require.NoError(t, err)
			moving(t, s)
			assert.Less(t, retained, int64(heapBound), "heap left behind by the flood")
			t.Logf("%d segments at %.0f/s; the stack received %d frames and sent %d; stream at %.3f of unloaded; heap peak in use %s, %s retained",
				sent, rate, stats.RxFrames-statsBefore.RxFrames, stats.TxFrames-statsBefore.TxFrames, loaded/base, mib(peak), mib(uint64(max(retained, 0))))
		})
	}
	require.NoError(t, s.finish())
	// The stack's end still receives: the peer answers it.
	require.NoError(t, xfer.Send(k, c, 1<<20, 4))
	st := e.Stack.Stats().Total
	t.Logf("stack: %d retransmits, %d RTO expiries, %d SACK and %d spurious recoveries", st.Retransmits, st.RTOTimeouts, st.SACKRecovery, st.SpuriousRecovery)
}

// timestamps returns the timestamp option (with two no-ops before it) a
// forged segment of the peer's needs to pass PAWS.
func timestamps(w flowState) []byte {
	o := []byte{1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(o[4:], w.peerTS)
	binary.BigEndian.PutUint32(o[8:], w.stackTS)
	return o
}

// sackBlocks returns a SACK option (with two no-ops before it) of three
// blocks of 1 to 8 bytes at random places between una and nxt: tiny,
// scattered ranges, each a separate scoreboard entry.
func sackBlocks(rng *rand.Rand, una, nxt uint32) []byte {
	const blocks = 3
	o := []byte{1, 1, 5, 2 + 8*blocks}
	inflight := nxt - una
	if int32(inflight) < 64 {
		return nil
	}
	for range blocks {
		start := una + 1 + rng.Uint32N(inflight-16)
		o = binary.BigEndian.AppendUint32(o, start)
		o = binary.BigEndian.AppendUint32(o, start+1+rng.Uint32N(8))
	}
	return o
}
