//go:build !linux

package afxdp

import (
	"fmt"
	"runtime"

	"github.com/polarnet/polarnet/polarnet"
)

// Link is an AF_XDP link. AF_XDP exists on Linux only: elsewhere New fails
// and a Link is never returned.
type Link struct{}

var _ polarnet.Link = (*Link)(nil)

// New returns an error wrapping polarnet.ErrNotSupported: AF_XDP needs Linux.
func New(Config) (*Link, error) {
	return nil, fmt.Errorf("afxdp: %w on %s (AF_XDP is Linux's)", polarnet.ErrNotSupported, runtime.GOOS)
}

// Info returns the zero LinkInfo.
func (*Link) Info() polarnet.LinkInfo { return polarnet.LinkInfo{} }

// Queues returns no queues.
func (*Link) Queues() []polarnet.Queue { return nil }

// Mode returns ModeAuto.
func (*Link) Mode() Mode { return ModeAuto }

// ZeroCopy returns false.
func (*Link) ZeroCopy() bool { return false }

// Close returns polarnet.ErrLinkClosed.
func (*Link) Close() error { return polarnet.ErrLinkClosed }
