// Package conformance is polarnet's interoperability suite against the
// kernel's TCP/IP: every scenario runs kernel↔kernel as the reference and
// then with polarnet in each applicable direction, over the link selected
// with -link, and the suite asserts that polarnet's observable outcome is
// the reference's.
//
// # Running
//
// The suite needs root (network namespaces, TAP devices) and iproute2:
//
//	go test -count=1 -timeout 20m ./conformance/ -link=tap
//
// Flags (after the package, or with -args):
//
//	-link    link kind (env POLARNET_CONFORMANCE_LINK; default tap)
//	-matrix  directory for matrix.md, matrix.json and pcap/ of failed runs
//	         (env POLARNET_CONFORMANCE_MATRIX; default $TMPDIR/polarnet-conformance)
//	-seed    seed of the impairments (default 1)
//	-strict  make known engine failures fail the suite
//	-queues  queue pairs of polarnet's links, so shards per stack (default 1)
//	-ack     on (default config) or off (ACK filter and delayed ACK off)
//	-short   smaller transfers and loops (automatic under -race)
//
// -run selects scenarios and directions, e.g.
// -run 'TestConformance/transfer/16MiB$/k2p': the reference runs first when
// -run leaves it out. Without root the suite skips, unless
// POLARNET_REQUIRE_PRIV is set (CI), which makes that a failure.
//
// # Directions and topology
//
// A run builds a fresh topology (Build) and tears it down afterwards, also
// when it fails:
//
//	k2k  kernel client (namespace) ─ link ─ relay ─ link ─ kernel server (namespace)
//	p2k  polarnet client ─ link ─ kernel server (namespace)
//	k2p  kernel client (namespace) ─ link ─ polarnet server
//	p2p  polarnet client ─ link ─ bridge (namespace) ─ link ─ polarnet server
//
// The near side (the polarnet stack; in k2k the kernel behind the relay)
// has 198.18.0.2/24 and fd00:198:18::2/64, the far side 198.18.0.1/24 and
// fd00:198:18::1/64. Between them sit, on the near side's link, the
// link/impair decorator (when the scenario impairs the path: netem in user
// space, since the kernel may have no netem) and a link/capture recorder;
// the kernel reference crosses the very same code through
// link/impair.Relay, so impairments and captures are identical in every
// direction.
//
// # Outcomes and bounds
//
// A scenario returns facts (errors by errno, bytes, options seen on the
// wire, counters) and times. Facts must equal the reference's; times are
// bounded by the reference measured in the same run, generously: an
// elapsed time may take 10x the reference plus 2s, a timer must fire
// within [ref/2 - 0.5s, 2 ref + 0.5s]. Hard-coded expectations are only
// those that hold whatever the kernel does (data arrives byte-exact).
//
// # The matrix
//
// TestMain prints the matrix (scenario × direction, pass/fail and time)
// and writes it as Markdown and JSON; a failed run's capture is written as
// pcap next to it. A run that fails because of a known engine bug is listed
// in knownFailures with the reason: it still runs and shows in the matrix
// as a known failure, without failing the suite (-strict makes it fail).
// TestMain also checks that the suite left no namespace, device or child
// process behind.
//
// # Adding a link
//
// A link joins the suite by implementing Kind (attach a link to a kernel
// interface in a namespace) and calling Register from an init function of
// this package; everything else is shared.
package conformance
