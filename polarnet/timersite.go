package polarnet

import (
	"runtime"
	"sync"
	"time"
)

// gVisor's TCP timers all come through Clock.AfterFunc, and MinRecoveryTimer
// is meant for two of them: the tail-loss probe, which queueing delay alone
// fires at microsecond round trips (docs/design.md, Known limits), and
// RACK's reordering timer. The reordering timer is armed only when a SACK
// shows a segment sent later delivered while an earlier one is not, which a
// path that neither loses nor reorders never does; floored at 50ms, it made
// each loss so detected wait that long where Linux waits a round trip and a
// quarter plus a tick. So it gets at most reorderingTimerFloor. gVisor
// creates each timer at its first arming, and RACK's reordering timer's in
// detectLoss: the clock tells it apart by that function on the call stack,
// read once per distinct stack (TestReorderingTimersToldApart holds the
// pinned gVisor to it).

// reorderingTimerFloor is the floor of RACK's reordering timer, about a
// kernel tick, unless MinRecoveryTimer is lower.
const reorderingTimerFloor = time.Millisecond

// reorderingArmer is the function, as the runtime names it, whose call
// creates RACK's reordering timer.
const reorderingArmer = "gvisor.dev/gvisor/pkg/tcpip/transport/tcp.(*rackControl).detectLoss"

// timerSites caches, by call stack, whether AfterFunc was called from
// reorderingArmer.
var timerSites sync.Map // [timerStackDepth]uintptr → bool

// timerStackDepth is how many frames above AfterFunc are read: enough for
// gVisor's timer.enable and resetOrStart, not inlined, and detectLoss.
const timerStackDepth = 6

// creatingReorderingTimer reports whether AfterFunc's caller is creating
// RACK's reordering timer; skip is how many frames lie between this
// function and AfterFunc's caller.
func creatingReorderingTimer(skip int) bool {
	var pcs [timerStackDepth]uintptr
	n := runtime.Callers(skip+2, pcs[:])
	if known, ok := timerSites.Load(pcs); ok {
		return known.(bool)
	}
	found := false
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if f.Function == reorderingArmer {
			found = true
			break
		}
		if !more {
			break
		}
	}
	timerSites.Store(pcs, found)
	return found
}
