//go:build !amd64

package polarnet

// Wakeups stay as the runtime makes them: gVisor keeps the runtime's
// spinning count for amd64 only.
func keepWakeupsLocal() {}

func releaseWakeups() {}
