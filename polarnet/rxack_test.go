package polarnet

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/link"
)

// TestSupersededACKs: a received pure ACK is dropped only when the next
// frame of its flow in the burst says all it does and more.
func TestSupersededACKs(t *testing.T) {
	ack, fin, rst := header.TCPFlagAck, header.TCPFlagFin, header.TCPFlagRst
	pure := func(port uint16, acked uint32) groSeg {
		return groSeg{port: port, seq: 1, ack: acked, flags: ack, window: 100}
	}
	answer := func(port uint16, acked uint32) groSeg {
		return groSeg{port: port, seq: 1, ack: acked, flags: ack | header.TCPFlagPsh, window: 100, payload: []byte("answer")}
	}
	with := func(s groSeg, f func(*groSeg)) groSeg { f(&s); return s }
	for _, tc := range []struct {
		name    string
		burst   []groSeg
		invalid int // a frame that fails its checks (1-based; 0: none)
		want    []bool
	}{
		{"an ACK, then the answer", []groSeg{pure(1, 10), answer(1, 10)}, 0, []bool{true, false}},
		{"an ACK, then one for more", []groSeg{pure(1, 10), pure(1, 20)}, 0, []bool{true, false}},
		{"three ACKs, each for more", []groSeg{pure(1, 10), pure(1, 20), pure(1, 30)}, 0, []bool{true, true, false}},
		{"another flow in between", []groSeg{pure(1, 10), answer(2, 10), answer(1, 10)}, 0, []bool{true, false, false}},
		{"IPv6", []groSeg{with(pure(1, 10), func(s *groSeg) { s.v6 = true }), with(answer(1, 10), func(s *groSeg) { s.v6 = true })}, 0, []bool{true, false}},
		{"duplicate ACKs stay", []groSeg{pure(1, 10), pure(1, 10)}, 0, []bool{false, false}},
		{"an ACK for less stays", []groSeg{pure(1, 20), answer(1, 10)}, 0, []bool{false, false}},
		{"SACK blocks stay", []groSeg{with(pure(1, 10), func(s *groSeg) { s.sack = true }), answer(1, 20)}, 0, []bool{false, false}},
		{"a larger window stays", []groSeg{with(pure(1, 10), func(s *groSeg) { s.window = 200 }), answer(1, 20)}, 0, []bool{false, false}},
		{"a FIN stays", []groSeg{with(pure(1, 10), func(s *groSeg) { s.flags |= fin }), answer(1, 20)}, 0, []bool{false, false}},
		{"a reset does not supersede", []groSeg{pure(1, 10), with(pure(1, 20), func(s *groSeg) { s.flags |= rst })}, 0, []bool{false, false}},
		{"data is never dropped", []groSeg{answer(1, 10), answer(1, 20)}, 0, []bool{false, false}},
		{"another flow's answer", []groSeg{pure(1, 10), answer(2, 20)}, 0, []bool{false, false}},
		{"the answer fails its checks", []groSeg{pure(1, 10), answer(1, 20)}, 2, []bool{false, false}},
		{"alone", []groSeg{pure(1, 10)}, 0, []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(tc.burst)
			s := &shard{rx: make([]link.RxFrame, n), rxHdrs: make([]rxHeaders, n), flowKeys: make([]uint64, n)}
			for i, seg := range tc.burst {
				s.rx[i] = seg.rxFrame()
			}
			s.parseBurst(n)
			drop := make([]bool, n)
			supersededACKs(s.rxHdrs, s.flowKeys, drop, func(j int) bool { return j+1 != tc.invalid })
			assert.Equal(t, tc.want, drop)
		})
	}
}

// In the poller's delivery, a superseded pure ACK never reaches gVisor,
// while the segment that superseded it does; when that segment fails its
// checksum, the pure ACK is delivered after all.
func TestSupersededACKNotDelivered(t *testing.T) {
	st, la := pipeStack(t, 1)
	sh := st.shards[0]
	sh.stop()
	sh.refill(0) // the poller released its buffers
	sh.refill(1)
	defer sh.releaseRx()
	delivered := sh.stack.Stats().IP.PacketsDelivered
	seg := func(flags uint8, payload string) []byte {
		return frame.TCPFrame(frame.TCPSpec{
			SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 9}, DstMAC: la.Info().MAC,
			Src: netip.AddrPortFrom(local.Addr(), 40000), Dst: remote,
			Seq: 1000, Ack: 5000, Flags: flags, Window: 512, Payload: []byte(payload),
		})
	}
	for _, tc := range []struct {
		name                       string
		corrupt                    bool
		wantDelivered, wantDropped uint64
	}{
		{"the answer checks out", false, 1, 1},
		{"the answer fails its checksum", true, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer := seg(frame.FlagACK|frame.FlagPSH, "answer")
			if tc.corrupt {
				answer[len(answer)-1] ^= 0xff
			}
			for i, f := range [][]byte{seg(frame.FlagACK, ""), answer} {
				sh.rx[i].Len, sh.rx[i].ChecksumValid = copy(sh.rx[i].Buf, f), false
			}
			before, dropped := delivered.Value(), sh.stats.rxSuperseded.Load()
			sh.parseBurst(2)
			sh.deliver(2, false)
			if sh.gro != nil {
				sh.gro.flush()
			}
			assert.Equal(t, before+tc.wantDelivered, delivered.Value(), "packets delivered to TCP")
			assert.Equal(t, dropped+tc.wantDropped, sh.stats.rxSuperseded.Load(), "pure ACKs dropped")
		})
	}
}
