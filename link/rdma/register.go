//go:build rdma && linux && cgo

package rdma

import (
	"os"

	"github.com/polarnet/polarnet/link"
)

// The RDMA link is selectable with POLARNET_LINK=rdma in binaries built with
// -tags rdma that import this package (dialer and listener do).
// POLARNET_DEVICE is the network interface (empty: the first port with raw
// packet support), POLARNET_QUEUES and POLARNET_MTU the Config fields of the
// same names; POLARNET_LINK_OPTIONS takes the others (see configFromParams).
// The flow rules take the stack's addresses from POLARNET_ADDR.
func init() { link.Register("rdma", openFromParams) }

func openFromParams(p link.Params) (link.Link, error) {
	cfg, err := configFromParams(p, os.Getenv)
	if err != nil {
		return nil, err
	}
	l, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return l, nil
}
