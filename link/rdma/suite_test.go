package rdma

import (
	"fmt"
	"testing"

	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/linktest"
)

// TestLinkSuite runs the link suite over two links on fake devices wired
// back to back, so the link.Queue contract is proven on the
// bookkeeping: refill, reaping, batching, waiting, closing. The wire has flow
// control (the suite expects every frame to arrive); the links have MACs of
// their own, so the flow rules steer the suite's frames (EtherType 0x88B5)
// to them.
func TestLinkSuite(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		caps func(*deviceCaps)
	}{
		{cfg: Config{}},
		{cfg: Config{Queues: 2}},
		{cfg: Config{Queues: 3, RxRing: 64, TxRing: 32}},
		{cfg: Config{Queues: 2}, caps: func(c *deviceCaps) { c.rss = false }},
		{cfg: Config{MTU: 9000, RxRing: 128}},
	} {
		name := fmt.Sprintf("queues=%d,rx=%d,tx=%d,mtu=%d,rss=%t", max(c.cfg.Queues, 1), c.cfg.RxRing, c.cfg.TxRing, c.cfg.MTU, c.caps == nil)
		t.Run(name, func(t *testing.T) {
			linktest.TestLinkPair(t, func(t *testing.T) (link.Link, link.Link) {
				w := newFakeWire(true)
				prep := func(d *fakeDevice) {
					if c.caps != nil {
						c.caps(&d.capsV)
					}
				}
				a := newFakeLink(t, w, 1, ownMAC(c.cfg, 1), prep)
				b := newFakeLink(t, w, 2, ownMAC(c.cfg, 2), prep)
				t.Cleanup(func() {
					// After the suite's Close: nothing leaked.
					a.Close()
					b.Close()
					requireAllFree(t, a)
					requireAllFree(t, b)
				})
				return a.Link, b.Link
			})
		})
	}
}
