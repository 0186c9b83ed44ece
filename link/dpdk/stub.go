//go:build !(dpdk && linux && cgo)

package dpdk

import (
	"fmt"

	"github.com/polarnet/polarnet/link"
)

// New returns an error wrapping link.ErrNotSupported: this build has no
// DPDK. Build with cgo and -tags dpdk, on Linux with DPDK installed.
func New(Config) (Link, error) { return nil, errNoDPDK() }

// InitEAL returns the error New returns: this build has no DPDK.
func InitEAL(EALConfig) error { return errNoDPDK() }

func errNoDPDK() error {
	return fmt.Errorf("dpdk: %w: %s; build with `go build -tags dpdk` (cgo enabled, Linux, "+
		"DPDK's headers and libraries installed: apt-get install libdpdk-dev pkg-config) "+
		"and import github.com/polarnet/polarnet/link/dpdk", link.ErrNotSupported, stubReason)
}
