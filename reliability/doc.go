// Package reliability holds the tests that prove a polarnet stack survives
// what the network and its operators do to it: floods from the kernel side
// (SYNs and cookie-guessing ACKs at a listener; RST, ACK and
// SYN-on-established segments aimed in and out of the windows, forged SACK
// blocks, tiny MSS), limits (buffer memory), link faults over TAP (carrier
// down and up, device deleted), graceful shutdown with traffic running, a
// soak over a lossy, reordering link, and the security defaults (no
// forwarding, spoofed sources, the minimum MSS, the ICMP rate limit). It
// has no code of its own: everything is in its tests.
//
// Each test builds its own topology: a TAP device whose kernel side sits in
// a network namespace of its own (198.18.100.1/25, fd00:198:18:100::1/64)
// and a stack on it (198.18.100.2/25, fd00:198:18:100::2/64, the kernel side
// as its IPv4 gateway). Attack traffic comes from the namespace through an
// AF_PACKET socket on the kernel side of the TAP, with sources in
// 198.18.100.128/25: off the stack's subnet, so its answers go to the
// gateway, which does not forward them. Tests that need root skip without
// it, unless POLARNET_REQUIRE_PRIV is set.
//
// Tests assert what must hold (bytes arrive exact, connections survive,
// counters move, memory stays bounded, nothing leaks), never how fast: the
// rates and throughput ratios they measure are logged (go test -v) for the
// record.
//
// The soak is a test of its own, sized by a flag (or POLARNET_SOAK):
//
//	go test ./reliability/ -run Soak -v -soak=10m
//
// Without the flag it runs for 60s (20s with -short).
//
// A sender whose whole window was lost, then retransmitted on a timeout (a
// carrier outage under bulk traffic), would crawl with RACK (the default
// loss recovery) but for the engine's repair: TestOutage measures the
// recovery against the kernel's, TestCarrierOutage rides out a carrier
// drop in bulk.
//
// What is proven elsewhere and not repeated here: MaxConns and the EMFILE
// of dial and Accept (polarnet TestMaxConns), martian sources over a pipe
// (polarnet TestMartianSourcesAreDropped), listen-backlog overflow, a
// basic SYN flood, the RFC 5961 challenge ACK to one forged RST, refused
// connections, and the unpredictability of ISNs and ephemeral ports (the
// conformance suite's listen-backlog-overflow, syn-flood, challenge-ack,
// refused and isn-and-port-randomness scenarios), the fallback policy of a
// link that cannot open (link/tap TestEnvironmentSwitch), RDMA completion
// errors (link/rdma, on a fake device), and the fuzz targets of the frame
// path and the parsers (scripts/fuzz).
package reliability
