//go:build !linux

package polarnet

import "runtime"

// pinThread locks the calling goroutine to its OS thread; CPU affinity is
// Linux-only.
func pinThread(int) { runtime.LockOSThread() }
