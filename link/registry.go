package link

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Params are the link settings that can come from the environment.
type Params struct {
	// Device is the interface name (POLARNET_DEVICE).
	Device string
	// Queues is the number of queue pairs; zero is the link's default
	// (POLARNET_QUEUES).
	Queues int
	// MTU is the link MTU; zero is the link's default (POLARNET_MTU).
	MTU int
	// Options are link-specific settings (POLARNET_LINK_OPTIONS, "k=v,k=v").
	Options map[string]string
}

// Opener opens a link from Params.
type Opener func(Params) (Link, error)

var (
	registryMu sync.Mutex
	registry   = map[string]Opener{}
)

// Register makes a link kind available to POLARNET_LINK. Link packages
// call it from init, so linking one into the binary is what makes it
// selectable (see Registration in the package doc).
func Register(kind string, open Opener) {
	registryMu.Lock()
	defer registryMu.Unlock()
	registry[kind] = open
}

// Open opens a registered link kind.
func Open(kind string, p Params) (Link, error) {
	registryMu.Lock()
	open, ok := registry[kind]
	kinds := make([]string, 0, len(registry))
	for k := range registry {
		kinds = append(kinds, k)
	}
	registryMu.Unlock()
	if !ok {
		sort.Strings(kinds)
		return nil, fmt.Errorf("polarnet: unknown link %q (available: %s): %w", kind, strings.Join(kinds, ", "), ErrNotSupported)
	}
	return open(p)
}

// EnvAddr names the variable with the stack's addresses (POLARNET_ADDR, the
// same as polarnet.EnvAddr). Params does not carry addresses, so links whose
// setup needs them (the AF_XDP program's filter, RDMA's flow rules) read it
// when their options give none.
const EnvAddr = "POLARNET_ADDR"
