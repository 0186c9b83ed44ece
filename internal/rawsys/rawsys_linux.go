// Package rawsys makes the system calls a poller makes on every burst, on
// descriptors that never block, as raw syscalls.
//
// The runtime's entry to an ordinary syscall (syscall.Syscall) prepares for
// one that blocks: among other things it wakes sysmon whenever sysmon
// sleeps, which is whenever the process was idle a moment, so that sysmon
// can take the P back. For a call that returns at once that is a futex wake
// and then sysmon's own wake-ups for every frame; pinned to one CPU they
// take turns with the poller. A raw syscall keeps the P, as user code does,
// which is right only for calls that cannot block.
package rawsys

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// NoWait runs the system call trap, which must not block (a non-blocking
// descriptor, MSG_DONTWAIT, a zero timeout), as a raw syscall, again while
// a signal interrupts it.
func NoWait(trap, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, unix.Errno) {
	for {
		r, _, errno := unix.RawSyscall6(trap, a1, a2, a3, a4, a5, a6)
		if errno != unix.EINTR {
			return r, errno
		}
	}
}

// zero is ppoll's timeout for PollNow.
var zero unix.Timespec

// PollNow polls fds without waiting and returns how many have events.
func PollNow(fds []unix.PollFd) (int, unix.Errno) {
	n, errno := NoWait(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)), uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
	return int(n), errno
}

// Yield gives the CPU to another runnable thread, if any (sched_yield),
// keeping the P.
func Yield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
