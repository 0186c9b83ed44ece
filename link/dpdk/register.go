//go:build dpdk && linux && cgo

package dpdk

import "github.com/polarnet/polarnet/link"

// The DPDK link is selectable with POLARNET_LINK=dpdk in binaries built with
// -tags dpdk that import this package (dialer and listener do).
// POLARNET_DEVICE is Config.Device (a vdev spec with its commas, or a PCI
// address), POLARNET_QUEUES and POLARNET_MTU the fields of the same names,
// and POLARNET_LINK_OPTIONS takes the other Config fields; see
// configFromParams.
func init() { link.Register("dpdk", openFromParams) }

func openFromParams(p link.Params) (link.Link, error) {
	cfg, err := configFromParams(p)
	if err != nil {
		return nil, err
	}
	return New(cfg)
}
