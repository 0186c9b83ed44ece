package polarnet

import (
	"runtime"
	"sync/atomic"
	"time"
)

// spinSlots bounds how many adaptive pollers of the process spin at once.
// A spinning poller holds a P between its yields. With every P held, each
// goroutine a burst wakes waits for a poller's yield, so two spinning
// pollers on 2 vCPUs burn both for no more round trips. And the runtime
// polls the network (kernel sockets, a TAP fd) only from a P with nothing
// to run, or from sysmon every 10ms: with one P, a spinning poller makes
// every kernel socket event wait out the spin budget, and a peer process
// sharing the CPU waits for it too (figures: docs/benchmarks.md). So at
// most GOMAXPROCS-1 pollers spin, none with one P unless its peer polls
// (spinLimit); the others sleep as soon as their queue is empty, as
// PollBlocking pollers do. PollBusy pollers spin regardless: they were
// asked to.
type spinSlots struct {
	used atomic.Int32
}

// adaptiveSpinners are the slots of every adaptive poller in the process:
// Ps are the process's, not a stack's.
var adaptiveSpinners spinSlots

// spinLimit is how many pollers may spin at once under the current
// GOMAXPROCS, which can change while a poller runs, and whether a spinning
// poller gives the CPU to other threads between its looks (handOver). With
// one P a poller whose peer polls (link.PolledPeer) may spin: it hands the
// CPU over, so that a peer process on the same CPU runs, and nothing else
// in the process waits longer than for any spin.
func spinLimit(peerPolls bool) (limit int32, yieldCPU bool) {
	n := int32(runtime.GOMAXPROCS(0))
	if n == 1 && peerPolls && canHandOver {
		return 1, true
	}
	return n - 1, false
}

// claim takes a slot if fewer than limit are taken, and sets *held if so.
func (s *spinSlots) claim(limit int32, held *bool) {
	for {
		n := s.used.Load()
		if n >= limit {
			return
		}
		if s.used.CompareAndSwap(n, n+1) {
			*held = true
			return
		}
	}
}

// leave gives back the slot *held says the caller has.
func (s *spinSlots) leave(held *bool) {
	if *held {
		s.used.Add(-1)
		*held = false
	}
}

// maxSpinGrowth bounds an adaptive poller's spin: SpinBudget times this.
const maxSpinGrowth = 8

// nextSpin is an adaptive poller's spin budget after a sleep of slept,
// given the budget cur it slept with and the configured base. A sleep that
// ended soon would have been a spin that caught its frame: a peer that was
// itself asleep when asked answers late by its wake-up and ours, and two
// ends that each sleep before the other answers keep waking each other on
// every round trip. So the budget doubles, up to maxSpinGrowth times base;
// a longer sleep (traffic paused) brings it back to base. KVM's halt
// polling grows and shrinks its window the same way.
func nextSpin(cur, base, slept time.Duration) time.Duration {
	limit := base * maxSpinGrowth
	if slept < limit {
		return min(2*cur, limit)
	}
	return base
}
