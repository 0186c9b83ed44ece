package polarnet

// ReaderWokenLocally reports whether a socket's reader is marked as woken on
// its waker's P and not yet run.
func ReaderWokenLocally() bool { return readerWokenLocally.Load() != nil }

// ReorderingTimers counts the RACK reordering timers st's clocks told apart.
func ReorderingTimers(st *Stack) (n uint64) {
	for _, sh := range st.shards {
		n += sh.clock.reorderingTimers.Load()
	}
	return n
}
