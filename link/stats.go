package link

// Statser is implemented by links that count what the engine cannot
// see: frames lost before the engine's RX burst (a full ring, no free
// buffer, a malformed descriptor), frames dropped after the link accepted
// them for sending, and the state of their buffer pools. polarnet.Stack.Stats
// reports them in Stats.Link. LinkStats may be called from any goroutine at any
// time, also after Close (then with the last values or none), and should
// cost no more than reading counters: scrapes call it.
type Statser interface {
	LinkStats() []QueueStats
}

// QueueStats are a link's own counters for one queue pair, or for the whole
// device. Links leave at zero what they do not count.
type QueueStats struct {
	// Queue is the queue pair (and so the shard) the counters belong to, or
	// -1 for counters the device keeps for all its queues together.
	Queue int
	// RxFrames, RxBytes, TxFrames and TxBytes are the frames the link (or
	// the device under it) received and sent, as it counts them.
	RxFrames, RxBytes, TxFrames, TxBytes uint64
	// RxRingFull counts received frames lost because the RX ring (or the
	// kernel's queue towards the link) was full: the poller fell behind.
	RxRingFull uint64
	// RxShed counts connection requests and stray segments the link
	// dropped while the engine had it shed them (SYNShedder,
	// StrayShedder).
	RxShed uint64
	// RxNoBuffers counts received frames lost because no free buffer was
	// available (an empty fill ring, an exhausted mempool).
	RxNoBuffers uint64
	// RxBadFrame counts received frames the link discarded as malformed or
	// truncated before the engine saw them.
	RxBadFrame uint64
	// TxDropped counts frames the link accepted from WriteBurst and then
	// could not send (the engine counts refused ones itself).
	TxDropped uint64
	// PoolSize is how many buffers the queue's pool holds; 0: no pool.
	// PoolFree is how many are free now, PoolFreeMin the lowest PoolFree
	// seen since the link opened (the watermark: near 0, the pool was
	// nearly exhausted).
	PoolSize, PoolFree, PoolFreeMin uint64
}
