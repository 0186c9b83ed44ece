//go:build !linux

package polarnet

// canHandOver reports whether handOver gives the CPU to other threads.
const canHandOver = false

// handOver does nothing where the OS yield is not wired.
func handOver() {}
