//go:build race

package conformance

// raceEnabled: the race detector slows the suite several times over, so it
// runs in short mode (smaller transfers and loops) under -race.
const raceEnabled = true
