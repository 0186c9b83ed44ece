//go:build amd64

package polarnet_test

import (
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

// Wake-ups kept on the current P borrow the runtime's count of spinning Ms:
// a count left raised would stop the runtime from ever waking an idle P for
// the whole process. After lone and many-frame bursts, parked and busy
// readers, in every poll mode, the count must settle back to what the
// runtime's own spinning Ms account for (none, once the process is idle),
// and no socket may stay marked as woken locally.
func TestLocalWakeupsAreReleased(t *testing.T) {
	for _, mode := range []polarnet.PollMode{polarnet.PollAdaptive, polarnet.PollBlocking, polarnet.PollBusy} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			a, z := newPair(t, pipe.Config{MTU: 65535}, func(c *polarnet.Config) { c.Poll = mode })
			const conns, rounds = 16, 50
			var wg sync.WaitGroup
			for range conns {
				client, server := connPair(t, a, z, addrB.Addr())
				go echo4K(server)
				wg.Go(func() {
					defer client.Close()
					req, resp := make([]byte, 4096), make([]byte, 64)
					for range rounds {
						if _, err := client.Write(req); !assert.NoError(t, err) {
							return
						}
						if _, err := io.ReadFull(client, resp); !assert.NoError(t, err) {
							return
						}
					}
				})
			}
			wg.Wait()
			require.NoError(t, a.Close())
			require.NoError(t, z.Close())
			assert.True(t, settles(func() bool { return !polarnet.ReaderWokenLocally() }),
				"a closed socket stays marked as woken locally")
			assert.True(t, settles(func() bool { return polarnet.SpinningMs() == 0 }),
				"the runtime's spinning count stays raised: %d", polarnet.SpinningMs())
		})
	}
}

// settles reports whether cond holds within five seconds, checked from this
// goroutine: a reader woken by the stacks' closing runs a moment after
// Close returns, and the runtime's spinning count is raised for a moment
// whenever a goroutine is readied on an idle P. So a check that starts a
// goroutine each time (assert.Eventually) counts the spinning M that runs
// it, and can fail on an idle process.
func settles(cond func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		if cond() {
			return true
		}
	}
	return false
}
