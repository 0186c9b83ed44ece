package polarnet

import (
	"sync/atomic"
	_ "unsafe" // go:linkname

	_ "gvisor.dev/gvisor/pkg/sync" // owns the address below
)

// spinningMs is the address of the runtime's count of spinning Ms
// (runtime.sched.nmspinning), which gVisor's sync package takes for its
// own Goready without wake-up at an offset its assembly hard-codes; a test
// checks it against the count the runtime reports (GODEBUG=schedtrace).
//
//go:linkname spinningMs gvisor.dev/gvisor/pkg/sync.nmspinning
var spinningMs *int32

// keepWakeupsLocal makes the goroutines readied until releaseWakeups run on
// the current P rather than wake an idle one: the runtime wakes an idle P
// only when no M is spinning, so one more counted spinner (as gVisor does
// around its Goready(wakep=false)) keeps it from doing so. Use it only
// where the caller blocks or yields right after, so they run promptly,
// and never block while holding it: a goroutine that sleeps with the count
// raised can go unwoken (its timer's wake-up of an idle P is suppressed too;
// a test process hung so).
func keepWakeupsLocal() { atomic.AddInt32(spinningMs, 1) }

func releaseWakeups() { atomic.AddInt32(spinningMs, -1) }
