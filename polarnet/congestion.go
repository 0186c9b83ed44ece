package polarnet

import (
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// Congestion control by path (TCPConfig.CongestionControl zero). gVisor's
// CUBIC grows its window by elapsed time over its smoothed round trip
// (RFC 9438's Reno-friendly region), and it holds that estimate at 1 ms
// (tcp.MinSRTT) or more: on a faster path it regrows after a loss slower
// than Reno by the ratio, so at a few percent loss its window sits at two
// segments and nearly every loss is a tail that waits for a probe. Reno
// grows per ACK whatever the round trip. CUBIC is for long fat paths, where
// it refills the window faster than Reno.
const (
	ccReno  = "reno"
	ccCubic = "cubic"
	// ccByPath is the shards' setting while the choice is left to
	// chooseCongestion.
	ccByPath = ccReno
	// cubicRTT is the handshake round trip above which a connection gets
	// CUBIC. It is well above the 1 ms at which gVisor's CUBIC goes wrong,
	// so that a handshake on a fast path slowed by address resolution or
	// scheduling does not pick it.
	cubicRTT = 5 * time.Millisecond
)

// chooseCongestion gives a new connection CUBIC if its handshake's round
// trip exceeded cubicRTT; the shards default to ccByPath. It is called
// before the connection sends data, so the window it starts with is the
// one either would.
func chooseCongestion(ep tcpip.Endpoint) {
	var info tcpip.TCPInfoOption
	if err := ep.GetSockOpt(&info); err != nil || info.RTT <= cubicRTT {
		return
	}
	cubic := tcpip.CongestionControlOption(ccCubic)
	// An endpoint reset meanwhile refuses it, and then sends nothing.
	_ = ep.SetSockOpt(&cubic)
}
