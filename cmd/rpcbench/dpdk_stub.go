//go:build !(dpdk && linux && cgo)

package main

import (
	"context"
	"errors"
)

// setupMemif is p2p-memif without DPDK in the build (see dpdk.go): the mode
// is known, so that asking for it says what is missing, but not listed.
func setupMemif(context.Context, *runCfg, *teardown) (serverEnd, clientEnd, error) {
	return nil, nil, errors.New("p2p-memif needs DPDK: build rpcbench with cgo and -tags dpdk (apt-get install libdpdk-dev pkg-config; see link/dpdk/README.md)")
}
