package link

// SYNShedder is implemented by queues that can drop connection requests
// (TCP segments with SYN and without ACK) before they take a place in the
// queue's ring, where the kernel or the device pays for them instead of the
// poller. Under a SYN flood the poller cannot drain a ring at the rate a
// peer fills it, and a full ring drops the frames of established
// connections with the flood's; the engine turns shedding on while its
// bursts show such a flood, and off again to see whether it has ended.
type SYNShedder interface {
	// ShedSYNs turns shedding on or off for the queue. While it is on, the
	// queue drops connection requests but for a random sample (one in
	// ShedSample), so that a listener under the flood still answers some
	// with SYN cookies and a client that retries gets through; other
	// frames pass as before. It returns ErrNotSupported when the queue
	// cannot shed (its device refused the program), and then is not
	// called again.
	ShedSYNs(on bool) error
}

// ShedSample is the share of connection requests a shedding queue lets
// through: one in ShedSample, a power of two (TAP's program masks a random
// number with it).
const ShedSample = 32
