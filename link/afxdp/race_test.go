//go:build race

package afxdp

// raceEnabled: the race detector slows the engine several times over, so
// the bulk transfers are smaller under -race.
const raceEnabled = true
