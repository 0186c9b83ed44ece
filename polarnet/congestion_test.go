package polarnet_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/polarnet/polarnet/link/impair"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

// By default each end of a connection uses Reno if the handshake's round
// trip was within CubicRTT and CUBIC if it took longer; a configured
// algorithm applies whatever the path. How long a handshake over the bare
// pipe takes is up to the scheduler, so that case checks the choice
// against the round trip measured.
func TestCongestionByPath(t *testing.T) {
	const slow = 20 * time.Millisecond
	for _, tc := range []struct {
		configured string
		delay      time.Duration
		want       string // "": by the round trip measured
	}{
		{"", 0, ""},
		{"", slow, "cubic"},
		{"cubic", 0, "cubic"},
		{"reno", slow, "reno"},
	} {
		t.Run(fmt.Sprintf("%q/%v", tc.configured, tc.delay), func(t *testing.T) {
			la, lb := pipe.New(pipe.Config{})
			cc := func(c *polarnet.Config) { c.TCP.CongestionControl = tc.configured }
			delayed := impair.New(la, impair.Config{Egress: impair.Impairment{Delay: tc.delay}})
			a := newStack(t, delayed, addrA, addrA6, cc)
			b := newStack(t, lb, addrB, addrB6, cc)
			client, server := connPair(t, a, b, addrB.Addr())
			for _, c := range []*polarnet.TCPConn{client, server} {
				rtt, want := polarnet.HandshakeRTT(c), tc.want
				if want == "" {
					want = "reno"
					if rtt > polarnet.CubicRTT {
						want = "cubic"
					}
				}
				assert.Equal(t, want, polarnet.CongestionControl(c), "%v, handshake %v", c.LocalAddr(), rtt)
			}
		})
	}
}
