package tap

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
)

// TestTxOffload hands frames asking for checksum completion and segmentation
// to one TAP link, has the kernel route them to another and checks what comes
// out there: with offloads off on the receiver, the kernel must have cut the
// frame into MSS-sized segments with correct checksums; with them on, it
// passes the large frame through, marked as checksum-valid.
func TestTxOffload(t *testing.T) {
	const mss = 1448
	gso := link.TxOffload{
		NeedsChecksum:  true,
		ChecksumStart:  tcpv4Start,
		ChecksumOffset: 16,
		GSO:            link.GSOTCPv4,
		GSOSize:        mss,
		HeaderLen:      tcpv4Start + tcpHdrLen,
	}
	csumOnly := link.TxOffload{NeedsChecksum: true, ChecksumStart: tcpv4Start, ChecksumOffset: 16}
	for _, tc := range []struct {
		name             string
		payload          int
		offload          link.TxOffload
		receiverOffloads bool
		segments         int // frames expected at the receiver
	}{
		{"GSO", 30000, gso, false, 21},
		{"GSO payload within one segment", 1000, gso, false, 1},
		{"GSO payload of exactly one segment", mss, gso, false, 1},
		{"checksum only", 1000, csumOnly, false, 1},
		{"GSO to receiver with offloads", 30000, gso, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNS(t)
			a := openTAP(t, Config{Queues: 1})
			b := openTAP(t, Config{Queues: 1, DisableOffloads: !tc.receiverOffloads})
			aMAC := plug(t, ns, a, 0)
			plug(t, ns, b, 1)
			sysctl(t, ns, "net/ipv4/ip_forward", "1")

			payload := make([]byte, tc.payload)
			for i := range payload {
				payload[i] = byte(i*7 + i>>8)
			}
			p := tcpv4{
				dstMAC: aMAC, srcMAC: a.Info().MAC,
				src: linkAddr(0), dst: linkAddr(1),
				sport: 40000, dport: 5001, seq: 1 << 31, payload: payload,
			}
			frame := p.frame(true)
			// A gather list cut across the headers and the payload.
			segs := [][]byte{frame[:20], frame[20:60], frame[60 : len(frame)/2], frame[len(frame)/2:]}
			n, err := a.Queues()[0].WriteBurst([]link.TxFrame{{Segs: segs, Offload: tc.offload}})
			require.NoError(t, err)
			require.Equal(t, 1, n)

			var got bytes.Buffer
			segments := 0
			receive(t, b.Queues()[0], b.Info().RxFrameSize, 5*time.Second, func(f []byte, checksumValid bool) bool {
				s, ok := parseTCPv4(t, f, tc.receiverOffloads)
				if !ok || s.dport != p.dport {
					return false
				}
				segments++
				assert.Equal(t, tc.receiverOffloads, checksumValid, "ChecksumValid")
				if !tc.receiverOffloads {
					assert.LessOrEqual(t, len(f), ethHdrLen+a.Info().MTU, "segment larger than the MTU")
				}
				assert.Equal(t, uint8(63), s.ttl, "forwarded TTL")
				assert.Equal(t, p.seq+uint32(got.Len()), s.seq, "sequence number of segment %d", segments)
				got.Write(s.payload)
				return got.Len() >= len(payload)
			})
			assert.Equal(t, tc.segments, segments)
			assert.True(t, bytes.Equal(payload, got.Bytes()), "payload differs after segmentation")
		})
	}
}

// TestRxChecksum has the kernel send UDP datagrams to the link: with offloads
// on, they arrive checksum-partial and marked ChecksumValid; with them off,
// complete and not marked.
func TestRxChecksum(t *testing.T) {
	for _, offloads := range []bool{true, false} {
		t.Run(map[bool]string{true: "offloads", false: "no offloads"}[offloads], func(t *testing.T) {
			ns := newNS(t)
			l := openTAP(t, Config{Queues: 1, DisableOffloads: !offloads})
			plug(t, ns, l, 0)
			sendUDP(t, ns, 0, netip.AddrPortFrom(linkAddr(0), 9), []byte("checksum me"))
			receive(t, l.Queues()[0], l.Info().RxFrameSize, 5*time.Second, func(f []byte, checksumValid bool) bool {
				payload, ok := udpv4Payload(t, f, 9, offloads)
				if ok {
					assert.Equal(t, "checksum me", string(payload))
					assert.Equal(t, offloads, checksumValid)
				}
				return ok
			})
		})
	}
}
