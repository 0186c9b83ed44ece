package rawsys

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestPollNow checks that PollNow reports a pipe readable once written to,
// without waiting before.
func TestPollNow(t *testing.T) {
	var p [2]int
	require.NoError(t, unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC))
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	fds := []unix.PollFd{{Fd: int32(p[0]), Events: unix.POLLIN}}
	n, errno := PollNow(fds)
	require.Zero(t, errno)
	assert.Zero(t, n, "empty pipe")

	msg := []byte("x")
	w, errno := NoWait(unix.SYS_WRITE, uintptr(p[1]), uintptr(unsafeBytes(msg)), 1, 0, 0, 0)
	require.Zero(t, errno)
	assert.Equal(t, uintptr(1), w)
	n, errno = PollNow(fds)
	require.Zero(t, errno)
	assert.Equal(t, 1, n)
	assert.NotZero(t, fds[0].Revents&unix.POLLIN)

	var buf [4]byte
	_, errno = NoWait(unix.SYS_READ, uintptr(p[0]), uintptr(unsafeBytes(buf[:])), 4, 0, 0, 0)
	require.Zero(t, errno)
	_, errno = NoWait(unix.SYS_READ, uintptr(p[0]), uintptr(unsafeBytes(buf[:])), 4, 0, 0, 0)
	assert.Equal(t, unix.EAGAIN, errno, "a non-blocking read of an empty pipe")
}

func unsafeBytes(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }
