package polarnet

import "sync/atomic"

// SpinningMs reads the runtime's count of spinning Ms, which
// keepWakeupsLocal raises while it holds wake-ups on the current P.
func SpinningMs() int32 { return atomic.LoadInt32(spinningMs) }

// KeepWakeupsLocal and ReleaseWakeups are keepWakeupsLocal and
// releaseWakeups.
func KeepWakeupsLocal() { keepWakeupsLocal() }

func ReleaseWakeups() { releaseWakeups() }
