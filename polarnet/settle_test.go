package polarnet

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/link/pipe"
)

// settle returns only once gVisor's TCP processors have handled what the
// poller delivered: each SYN delivered has been answered by then. The
// test stands in for the stopped poller.
func TestSettleWaitsForTheProcessors(t *testing.T) {
	st, la := pipeStack(t, 1)
	ln, err := st.ListenTCP("tcp", remote, 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	defer ln.Close()
	sh := st.shards[0]
	sh.stop()
	sh.refill(0) // the poller released its buffers
	defer sh.releaseRx()
	sent := sh.stack.Stats().TCP.SegmentsSent
	for i := range 50 {
		syn := frame.TCPFrame(frame.TCPSpec{
			SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 9}, DstMAC: la.Info().MAC,
			Src: netip.AddrPortFrom(local.Addr(), uint16(40000+i)), Dst: remote,
			Seq: 1000, Flags: frame.FlagSYN, Window: 65535, Options: frame.MSSOption(1460),
		})
		sh.rx[0].Len, sh.rx[0].ChecksumValid = copy(sh.rx[0].Buf, syn), true
		before := sent.Value()
		sh.parseBurst(1)
		sh.deliver(1, false)
		sh.unsettled = true
		sh.settle()
		assert.Equal(t, before+1, sent.Value(), "SYN %d answered", i)
	}
}

// Once the stack is closed its processors are gone: settle leaves them be.
func TestSettleAfterClose(t *testing.T) {
	st, _ := pipeStack(t, 1)
	require.NoError(t, st.Close())
	sh := st.shards[0]
	sh.unsettled = true
	sh.settle()
	assert.False(t, sh.unsettled)
}

// pipeStack returns a stack at remote's address on one end of a pipe of
// queues queue pairs, and that end; both are closed when the test ends.
func pipeStack(t *testing.T, queues int) (*Stack, *pipe.Link) {
	t.Helper()
	la, lb := pipe.New(pipe.Config{Queues: queues})
	t.Cleanup(func() { lb.Close() })
	st, err := New(Config{Link: la, Addrs: []netip.Prefix{netip.PrefixFrom(remote.Addr(), 24)}})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st, la
}
