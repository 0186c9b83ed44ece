//go:build !linux

package afxdp

import (
	"fmt"
	"runtime"

	"github.com/polarnet/polarnet/link"
)

// Link is an AF_XDP link. AF_XDP exists on Linux only: elsewhere New fails
// and a Link is never returned.
type Link struct{}

var _ link.Link = (*Link)(nil)

// New returns an error wrapping link.ErrNotSupported: AF_XDP needs Linux.
func New(Config) (*Link, error) {
	return nil, fmt.Errorf("afxdp: %w on %s (AF_XDP is Linux's)", link.ErrNotSupported, runtime.GOOS)
}

// Info returns the zero link.Info.
func (*Link) Info() link.Info { return link.Info{} }

// Queues returns no queues.
func (*Link) Queues() []link.Queue { return nil }

// Mode returns ModeAuto.
func (*Link) Mode() Mode { return ModeAuto }

// ZeroCopy returns false.
func (*Link) ZeroCopy() bool { return false }

// Close returns link.ErrClosed.
func (*Link) Close() error { return link.ErrClosed }
