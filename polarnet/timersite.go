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
// quarter plus a tick. So it gets at most reorderingTimerFloor. The probe
// timer's floor, which its wake-up alone cannot hold, is held per flow on
// the way out (probehold.go): the clock wakes it after lossyFloor at the
// least, the lowest floor a flow may have, and marks the time its
// callback runs so that the TX queue knows a probe when one goes. gVisor
// creates each timer at its first arming,
// RACK's reordering timer in detectLoss and the probe timer in schedulePTO:
// the clock tells them apart by that function on the call stack, read once
// per distinct stack (TestTimersToldApart holds the pinned gVisor to it).

// reorderingTimerFloor is the floor of RACK's reordering timer, about a
// kernel tick, unless MinRecoveryTimer is lower.
const reorderingTimerFloor = time.Millisecond

// timerKind is what the clock knows of a gVisor timer.
type timerKind uint8

const (
	otherTimer      timerKind = iota
	reorderingTimer           // RACK's reordering timer
	probeTimer                // the tail-loss probe's
)

// timerArmers are the functions, as the runtime names them, whose calls
// create the timers told apart.
var timerArmers = map[string]timerKind{
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp.(*rackControl).detectLoss": reorderingTimer,
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp.(*sender).schedulePTO":     probeTimer,
}

// timerSites caches, by call stack, the kind of timer AfterFunc was
// called for.
var timerSites sync.Map // [timerStackDepth]uintptr → timerKind

// timerStackDepth is how many frames above AfterFunc are read: enough for
// gVisor's timer.enable and resetOrStart, not inlined, and the armer.
const timerStackDepth = 6

// creatingTimer returns the kind of timer AfterFunc's caller is creating;
// skip is how many frames lie between this function and AfterFunc's
// caller.
func creatingTimer(skip int) timerKind {
	var pcs [timerStackDepth]uintptr
	n := runtime.Callers(skip+2, pcs[:])
	if known, ok := timerSites.Load(pcs); ok {
		return known.(timerKind)
	}
	kind := otherTimer
	callerNamed(pcs[:n], func(name string) bool {
		k, ok := timerArmers[name]
		if ok {
			kind = k
		}
		return ok
	})
	timerSites.Store(pcs, kind)
	return kind
}

// callerNamed reports whether a function of the call stack pcs (from
// runtime.Callers) satisfies is, asked of each frame's runtime name from
// the innermost until it says yes.
func callerNamed(pcs []uintptr, is func(name string) bool) bool {
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		if is(f.Function) {
			return true
		}
		if !more {
			return false
		}
	}
}
