//go:build !linux

package tap

import (
	"fmt"
	"runtime"

	"github.com/polarnet/polarnet/polarnet"
)

// Link is a TAP device driven from user space. TAP links exist on Linux only:
// elsewhere New fails and a Link is never returned.
type Link struct{}

var _ polarnet.Link = (*Link)(nil)

// New returns an error wrapping polarnet.ErrNotSupported: TAP links need Linux.
func New(Config) (*Link, error) {
	return nil, fmt.Errorf("tap: %w on %s", polarnet.ErrNotSupported, runtime.GOOS)
}

// Info returns the zero LinkInfo.
func (*Link) Info() polarnet.LinkInfo { return polarnet.LinkInfo{} }

// Queues returns no queues.
func (*Link) Queues() []polarnet.Queue { return nil }

// Close returns polarnet.ErrLinkClosed.
func (*Link) Close() error { return polarnet.ErrLinkClosed }
