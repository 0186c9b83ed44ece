package polarnet

// ReaderWokenLocally reports whether a socket's reader is marked as woken on
// its waker's P and not yet run.
func ReaderWokenLocally() bool { return readerWokenLocally.Load() != nil }

// TimersToldApart counts the RACK reordering timers and tail-loss probe
// timers st's clocks told apart.
func TimersToldApart(st *Stack) (reordering, probe uint64) {
	for _, sh := range st.shards {
		reordering += sh.clock.made[reorderingTimer].Load()
		probe += sh.clock.made[probeTimer].Load()
	}
	return reordering, probe
}

// RxBurstSize is how many frames one ReadBurst may return; BacklogBursts
// full bursts in a row show a backlog (shed.go).
const (
	RxBurstSize   = rxBurstSize
	BacklogBursts = backlogBursts
)
