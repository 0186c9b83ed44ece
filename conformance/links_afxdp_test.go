package conformance

import (
	"testing"

	"github.com/polarnet/polarnet/link"
)

// TestAFXDPAttach: the afxdp kind honours AttachOptions and Close leaves
// nothing behind.
func TestAFXDPAttach(t *testing.T) {
	testVethKindAttach(t, vethKindCase{
		name: "afxdp",
		caps: func(offloads bool) link.Capabilities {
			if offloads {
				return link.CapRXChecksum | link.CapTXChecksum
			}
			return 0
		},
		// Frames of 65014 bytes would span 17 UMEM frames: New refuses,
		// after the kernel's end went into the namespace.
		fail:    AttachOptions{MTU: 65000},
		failErr: link.ErrNotSupported,
	})
}
