package link

import "net/netip"

// SYNShedder is implemented by queues that can drop connection requests
// (TCP segments with SYN and without ACK) before they take a place in the
// queue's ring, where the kernel or the device pays for them instead of the
// poller. Under a SYN flood the poller cannot drain a ring at the rate a
// peer fills it, and a full ring drops the frames of established
// connections with the flood's; the engine turns shedding on while its
// bursts show such a flood, and off again once the queue's count of what
// it shed shows the flood has ended.
type SYNShedder interface {
	// ShedSYNs turns shedding on or off for the queue. While it is on, the
	// queue drops connection requests but for a random sample (one in
	// ShedSample), so that a listener under the flood still answers some
	// with SYN cookies and a client that retries gets through; other
	// frames pass as before. It returns ErrNotSupported when the queue
	// cannot shed (its device refused the program), and then is not
	// called again.
	ShedSYNs(on bool) error
	// SYNsShed returns how many connection requests the queue has dropped
	// since it was made.
	SYNsShed() uint64
}

// ShedSample is the share of connection requests (or stray segments) a
// shedding queue lets through: one in ShedSample, a power of two (TAP's
// program masks a random number with it). Each one let through costs the
// poller gVisor's handling and mostly an answer's write, where a kernel
// handles a flood in the sender's context; one in 128 keeps what the flood
// takes from the established connections no more than what a kernel's
// flood takes from its own (docs/benchmarks.md, floods).
const ShedSample = 128

// StrayShedder is implemented by queues that can drop, before their ring,
// stray segments: bare TCP segments (an ACK without data, SYN, FIN or RST)
// of flows the engine has not allowed. An ACK flood guessing at SYN
// cookies is made of them, and the device cannot tell them from a
// connection's ACKs, so the engine names its connections.
type StrayShedder interface {
	// ShedStrays turns shedding on or off for the queue. While it is on,
	// the queue drops stray segments but for one in ShedSample, so that a
	// connection the engine has not named yet (a handshake completed by a
	// cookie) still gets some through; other frames pass as before. It
	// returns ErrNotSupported when the queue cannot shed.
	ShedStrays(on bool) error
	// StraysShed returns how many stray segments the queue has dropped
	// since it was made.
	StraysShed() uint64
	// AllowFlows lets the bare segments of flows pass while any queue of
	// the link sheds. A link holds a bounded number of flows and may
	// forget the ones allowed longest ago.
	AllowFlows(flows []Flow) error
}

// Flow names a TCP connection by its two ends.
type Flow struct {
	Local, Remote netip.AddrPort
}
