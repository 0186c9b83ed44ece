package link

// PolledPeer is implemented by queues whose peer is a poll-mode end on the
// same host, such as the other process of a net_memif link: it sees what
// the queue sends without being woken, and it sends while the engine
// spins. An adaptive poller with a single P (GOMAXPROCS 1), which
// otherwise sleeps as soon as its queue is empty, then spins as it would
// with more and gives the CPU to other threads between its looks, so two
// ends sharing a CPU take turns on it instead of waking each other
// through the kernel on every frame.
type PolledPeer interface {
	// PeerPolls reports whether the queue's peer polls.
	PeerPolls() bool
}
