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
// software steering: a flow belongs to queue (localPort XOR remotePort) mod
// queues. For a listener's flows it spreads by the peer's port; for a dial,
// any wanted queue is reached by choosing the local port.
func PortSteering(localPort, remotePort uint16, queues int) int {
	if queues <= 1 {
		return 0
	}
	return int(localPort^remotePort) % queues
}
