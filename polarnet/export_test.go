package polarnet

// ReaderWokenLocally reports whether a socket's reader is marked as woken on
// its waker's P and not yet run.
func ReaderWokenLocally() bool { return readerWokenLocally.Load() != nil }
