//go:build !(rdma && linux && cgo)

package rdma

import (
	"fmt"

	"github.com/polarnet/polarnet/link"
)

// New returns an error wrapping link.ErrNotSupported: this binary has no
// verbs layer. Discovery (LookupNetdev, LookupDevice, Candidates) works in
// every build.
func New(Config) (*Link, error) {
	return nil, errNoVerbs()
}

// The kind is registered in every build, so that POLARNET_LINK=rdma in one
// without verbs says how to get it rather than that it is unknown.
func init() {
	link.Register("rdma", func(link.Params) (link.Link, error) { return nil, errNoVerbs() })
}

func errNoVerbs() error {
	return fmt.Errorf("rdma: %w: this binary was built without the verbs layer (it needs the rdma build tag, "+
		"cgo and Linux); build with `go build -tags rdma` and CGO_ENABLED=1, with libibverbs' headers installed "+
		"(apt-get install libibverbs-dev), and run with "+
		"CAP_NET_RAW (raw packet queue pairs need it)", link.ErrNotSupported)
}
