//go:build race

package reliability

// raceEnabled: the race detector makes the stack several times slower, so
// the tests that offer it a steady load offer less under -race.
const raceEnabled = true
