package link

import "net/netip"

// Steerer is implemented by links that spread received flows over their
// queues in a way the engine can predict: RSS with a known Toeplitz key, or
// a steering program of polarnet's own (TAP's eBPF, AF_XDP's XDP program).
// The engine places each connection on the shard of the queue its frames
// arrive on: a dialing shard picks a local port for which RxQueue returns
// its own queue, and a listener's connections belong to the shard that
// received the SYN. Frames of links that do not implement Steerer are
// classified with PortSteering and handed to their owner in software.
type Steerer interface {
	// RxQueue returns the queue on which the link receives the TCP frames
	// that remote sends to local, or a negative number if the link cannot
	// tell (its spread is not configured), in which case the engine steers
	// in software.
	RxQueue(local, remote netip.AddrPort) int
}

// PortSteering is the rule of polarnet's own steering programs and of its
// software steering: a flow belongs to queue h mod queues, h the middle 16
// bits of (localPort XOR remotePort) times PortSteeringMultiplier (a
// multiplicative hash, the same for both directions). For a listener's
// flows it spreads by the peer's port; for a dial, any wanted queue is
// reached by choosing the local port. The XOR alone is not enough: Linux's
// connect() takes ephemeral ports of one parity, so every kernel client of
// one server port would XOR to the same parity and an even queue count
// would leave half the queues without a flow.
func PortSteering(localPort, remotePort uint16, queues int) int {
	if queues <= 1 {
		return 0
	}
	return int(uint32(localPort^remotePort)*PortSteeringMultiplier>>16) % queues
}

// PortSteeringMultiplier is PortSteering's multiplier (2^32 over the golden
// ratio), exported for the steering programs that compute the same rule.
const PortSteeringMultiplier = 0x9E3779B1
