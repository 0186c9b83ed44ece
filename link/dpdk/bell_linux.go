//go:build dpdk && linux && cgo

package dpdk

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/internal/rawsys"
)

// Values of a doorbell flag.
const (
	bellAwake  = 0
	bellAsleep = 1 // the end sleeps and wants a ring
	bellRung   = 2 // its peer rang
)

// bellFile is the shared flags file of a net_memif link's doorbells.
type bellFile struct {
	mem  []byte
	path string
}

// bell is one queue's doorbell: its own flag and socket, and its peer's.
type bell struct {
	fd       int
	path     string // own socket's file, "" when abstract
	mine     *uint32
	peer     *uint32
	peerAddr unix.RawSockaddrUnix // for sendto, raw (rawsys)
	peerLen  uintptr
}

// openBellFile maps the shared flags file, creating it if needed.
func openBellFile(path string) (*bellFile, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Size < memifBellSize {
		if err := unix.Ftruncate(fd, memifBellSize); err != nil {
			return nil, &os.PathError{Op: "truncate", Path: path, Err: err}
		}
	}
	mem, err := unix.Mmap(fd, 0, memifBellSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, &os.PathError{Op: "mmap", Path: path, Err: err}
	}
	return &bellFile{mem: mem, path: path}, nil
}

func (f *bellFile) flag(role string, queue int) *uint32 {
	return (*uint32)(unsafe.Pointer(&f.mem[memifBellFlag(role, queue)]))
}

func (f *bellFile) close() {
	if f != nil && f.mem != nil {
		unix.Munmap(f.mem)
		f.mem = nil
	}
}

// newBell binds queue's doorbell socket for an end of the link.
func newBell(f *bellFile, p memifBellPaths, queue int) (*bell, error) {
	if queue >= memifBellQueues {
		return nil, fmt.Errorf("queue %d beyond the doorbell file's %d", queue, memifBellQueues)
	}
	own, peer := p.bell(p.role, queue), p.bell(p.peer, queue)
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	b := &bell{fd: fd, mine: f.flag(p.role, queue), peer: f.flag(p.peer, queue)}
	b.peerLen = rawUnixAddr(&b.peerAddr, peer)
	if !strings.HasPrefix(own, "@") {
		b.path = own
		os.Remove(own) // a previous run's
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: own}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding doorbell %s: %w", own, err)
	}
	atomic.StoreUint32(b.mine, bellAwake)
	return b, nil
}

// sleeping marks the end asleep; call it before the last look at the ring.
func (b *bell) sleeping() { atomic.StoreUint32(b.mine, bellAsleep) }

// awake marks the end awake again.
func (b *bell) awake() { atomic.StoreUint32(b.mine, bellAwake) }

// ring wakes the peer if it sleeps; call it after a send. It reports
// whether it rang.
func (b *bell) ring() bool {
	if !atomic.CompareAndSwapUint32(b.peer, bellAsleep, bellRung) {
		return false
	}
	one := byte(1)
	_, errno := rawsys.NoWait(unix.SYS_SENDTO, uintptr(b.fd), uintptr(unsafe.Pointer(&one)), 1, unix.MSG_DONTWAIT,
		uintptr(unsafe.Pointer(&b.peerAddr)), b.peerLen)
	// A peer without a bell (not polarnet, or gone) is woken by its timer.
	return errno == 0 || errno == unix.EAGAIN
}

// rawUnixAddr fills sa with the Unix socket address name ("@" first:
// abstract) and returns its length.
func rawUnixAddr(sa *unix.RawSockaddrUnix, name string) uintptr {
	sa.Family = unix.AF_UNIX
	for i := range len(name) {
		sa.Path[i] = int8(name[i])
	}
	n := len(name) + 1 // a path's terminating zero
	if strings.HasPrefix(name, "@") {
		sa.Path[0] = 0
		n = len(name)
	}
	return unsafe.Offsetof(sa.Path) + uintptr(n)
}

// drain empties the bell socket.
func (b *bell) drain() {
	var buf [64]byte
	for range 64 {
		if _, errno := rawsys.NoWait(unix.SYS_RECVFROM, uintptr(b.fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), unix.MSG_DONTWAIT, 0, 0); errno != 0 {
			return
		}
	}
}

func (b *bell) close() {
	unix.Close(b.fd)
	if b.path != "" {
		os.Remove(b.path)
	}
}
