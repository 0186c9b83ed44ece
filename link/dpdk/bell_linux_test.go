//go:build dpdk && linux && cgo

package dpdk

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestBellRings checks that a bell rings its peer, by a socket file and by
// an abstract address, only while the peer sleeps, and that drain empties
// the peer's socket.
func TestBellRings(t *testing.T) {
	dir := t.TempDir()
	for name, args := range map[string]string{
		"file":     "socket-abstract=no,socket=" + filepath.Join(dir, "m.sock"),
		"abstract": "socket=" + filepath.Join(dir, "a.sock"),
	} {
		t.Run(name, func(t *testing.T) {
			server := memifBells("role=server," + args)
			client := memifBells(args)
			server.shm = filepath.Join(dir, name+".pnbell")
			client.shm = server.shm
			f, err := openBellFile(server.shm)
			require.NoError(t, err)
			defer f.close()
			s, err := newBell(f, server, 1)
			require.NoError(t, err)
			defer s.close()
			c, err := newBell(f, client, 1)
			require.NoError(t, err)
			defer c.close()

			readable := func(b *bell) bool {
				fds := []unix.PollFd{{Fd: int32(b.fd), Events: unix.POLLIN}}
				n, err := unix.Poll(fds, 0)
				require.NoError(t, err)
				return n == 1
			}
			assert.False(t, s.ring(), "the client is awake")
			assert.False(t, readable(c))
			c.sleeping()
			assert.True(t, s.ring(), "the client sleeps")
			assert.True(t, readable(c), "the ring reached the client")
			assert.False(t, s.ring(), "rung once until it sleeps again")
			c.drain()
			assert.False(t, readable(c), "drained")
			c.awake()
			s.sleeping()
			assert.True(t, c.ring())
			assert.True(t, readable(s))
		})
	}
}
