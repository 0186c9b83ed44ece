//go:build dpdk && linux

package conformance

import (
	"testing"

	"github.com/polarnet/polarnet/link"
)

// TestDPDKAttach: the dpdk kind honours AttachOptions and Close leaves
// nothing behind.
func TestDPDKAttach(t *testing.T) {
	testVethKindAttach(t, vethKindCase{
		name: "dpdk",
		// net_af_packet has no offloads: the link checks received
		// checksums itself (accepting the kernel peer's partial ones),
		// offloads or not.
		caps: func(bool) link.Capabilities { return link.CapRXChecksum },
		// More queues than a port may have: New refuses, after the
		// kernel's end went into the namespace.
		fail:    AttachOptions{MTU: 1500, Queues: 1025},
		failMsg: "1025 queues requested",
	})
}
