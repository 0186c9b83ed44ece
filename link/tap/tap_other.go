//go:build !linux

package tap

import (
	"fmt"
	"runtime"

	"github.com/polarnet/polarnet/link"
)

// Link is a TAP device driven from user space. TAP links exist on Linux only:
// elsewhere New fails and a Link is never returned.
type Link struct{}

var _ link.Link = (*Link)(nil)

// New returns an error wrapping link.ErrNotSupported: TAP links need Linux.
func New(Config) (*Link, error) {
	return nil, fmt.Errorf("tap: %w on %s", link.ErrNotSupported, runtime.GOOS)
}

// Info returns the zero link.Info.
func (*Link) Info() link.Info { return link.Info{} }

// Queues returns no queues.
func (*Link) Queues() []link.Queue { return nil }

// Close returns link.ErrClosed.
func (*Link) Close() error { return link.ErrClosed }
