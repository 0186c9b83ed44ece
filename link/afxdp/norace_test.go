//go:build !race

package afxdp

const raceEnabled = false
