//go:build dpdk && linux && cgo

package dpdk

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/linktest"
)

// TestLinkSuiteAFPacket runs the link suite between net_af_packet on one
// end of a veth and a packet socket on the other end, in a namespace.
func TestLinkSuiteAFPacket(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"sleep", Config{}},
		{"offloads=off", Config{DisableOffloads: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			linktest.TestLinkPair(t, func(t *testing.T) (link.Link, link.Link) {
				v := newVeth(t, 1500)
				cfg := c.cfg
				cfg.Device = afPacketDevice(v.A, "framecnt=4096")
				l := openLink(t, cfg)
				var p *linktest.PacketSocketLink
				require.NoError(t, v.NS.Do(func() (err error) {
					p, err = linktest.OpenPacketSocket(v.B)
					return err
				}))
				return l, p
			})
		})
	}
}

// TestLinkSuiteTap runs the link suite between net_tap and a packet socket
// on the TAP device the PMD creates. The device is created in a namespace
// of its own: net_tap keeps the sockets it controls the device with in the
// namespace it was created in.
func TestLinkSuiteTap(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"auto", Config{}},
		{"sleep", Config{Wait: WaitSleep}},
		{"offloads=off", Config{DisableOffloads: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			linktest.TestLinkPair(t, func(t *testing.T) (link.Link, link.Link) {
				tt := newTapTopo(t, c.cfg, false)
				var p *linktest.PacketSocketLink
				require.NoError(t, tt.NS.Do(func() (err error) {
					p, err = linktest.OpenPacketSocket(tt.Iface)
					return err
				}))
				return tt.Link, p
			})
		})
	}
}
