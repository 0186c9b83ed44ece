package polarnet

import "github.com/polarnet/polarnet/internal/rawsys"

// canHandOver reports whether handOver gives the CPU to other threads.
const canHandOver = true

// handOver gives the CPU to another runnable thread of any process.
func handOver() { rawsys.Yield() }
