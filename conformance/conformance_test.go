package conformance

import (
	"testing"
)

// TestConformance runs every scenario in every applicable direction over
// the link -link selects, and fills the matrix TestMain writes.
//
// Run a part with -run, e.g. -run 'TestConformance/transfer' or
// -run 'TestConformance/keepalive/p2k' (the reference then runs first).
func TestConformance(t *testing.T) {
	var all []*Scenario
	for _, group := range [][]*Scenario{
		connectionScenarios(),
		transferScenarios(),
		timerScenarios(),
		pathScenarios(),
		loadScenarios(),
		packetScenarios(),
	} {
		all = append(all, group...)
	}
	runScenarios(t, all)
}

// knownFailures lists the runs that fail because of an engine bug, keyed
// "scenario/direction", with the reason. They run like every other run and
// show in the matrix as known failures; -strict makes them fail the suite.
// Remove an entry once the engine is fixed (the matrix says when one
// passes).
var knownFailures = map[string]string{}

func init() {
	const lossySender = "polarnet sending at 5% loss: with a few segments in flight, each lost tail costs a probe's floor (5ms on a lossy flow) where Linux waits about 2ms, so the exchange passes (p2k 1.6-2.0s, p2p 2.6-3.6s of which 1s is the handshake: the seeded loss drops its SYN-ACK or the ACK of it) but too close to its bound (10x the kernel's 0.2s, plus 2s)"
	for _, d := range []Direction{StackClient, StackStack} {
		knownFailures["impaired/loss-5%/"+string(d)] = lossySender
	}
}

// knownShardedFailures are known failures with -queues > 1.
var knownShardedFailures = map[string]string{
	"listen-backlog-overflow/k2p": shardedBacklog,
	"listen-backlog-overflow/p2p": shardedBacklog,
}

const shardedBacklog = "by design: each shard's listener has an equal share of the accept queue (backlog+1 split over N shards, rounded up), so how many connections queue depends on how the flows spread over shards (here 2 to 4, not 3)"
