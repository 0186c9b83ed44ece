package polarnet

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"gvisor.dev/gvisor/pkg/waiter"
)

// TestListenerCloseUnregisters: once a listener is closed, none of its
// shards' gVisor listeners notifies it any more. Its entries used to be
// unregistered by the address of a copy, which left them registered.
func TestListenerCloseUnregisters(t *testing.T) {
	st, _ := pipeStack(t, 2)
	ln, err := st.ListenTCP("tcp", remote, 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	var queues []*waiter.Queue
	for _, le := range ln.eps {
		queues = append(queues, le.wq)
	}
	require.Len(t, queues, 2)
	for _, q := range queues {
		assert.NotZero(t, q.Events(), "registered while listening")
	}
	require.NoError(t, ln.Close())
	for i, q := range queues {
		assert.Zero(t, q.Events(), "shard %d's listener still notifies", i)
	}
}
