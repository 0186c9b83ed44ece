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

// The kind is registered in every build, so that POLARNET_LINK=dpdk in one
// without DPDK says how to get it rather than that it is unknown.
func init() {
	link.Register("dpdk", func(link.Params) (link.Link, error) { return nil, errNoDPDK() })
}

func errNoDPDK() error {
	return fmt.Errorf("dpdk: %w: %s; build with `go build -tags dpdk` (cgo enabled, Linux, "+
		"DPDK's headers and libraries installed: apt-get install libdpdk-dev pkg-config)", link.ErrNotSupported, stubReason)
}
