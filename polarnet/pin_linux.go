package polarnet

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// pinThread locks the calling goroutine to its OS thread and binds the
// thread to cpu. Failing to bind (a restricted cpuset) leaves it unpinned.
func pinThread(cpu int) {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	unix.SchedSetaffinity(0, &set)
}
