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

// knownShardedFailures are known failures with -queues > 1.
var knownShardedFailures = map[string]string{}
