package linktest_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/testenv"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/linktest"
)

// TestPacketSocketVeth runs the suite over a real device: a veth pair in a
// namespace of its own, a PacketSocketLink on each end. IPv6 on the pair
// sends router solicitations and MLD reports, which the suite must ignore.
func TestPacketSocketVeth(t *testing.T) {
	testenv.RequirePriv(t)
	for _, mtu := range []int{1500, 9000, 65535} {
		t.Run(fmt.Sprint("MTU", mtu), func(t *testing.T) {
			linktest.TestLinkPair(t, func(t *testing.T) (link.Link, link.Link) {
				return vethPair(t, mtu)
			})
		})
	}
}

// vethPair opens a PacketSocketLink on each end of a new veth pair.
func vethPair(t *testing.T, mtu int) (a, b *linktest.PacketSocketLink) {
	ns := testenv.NewNS(t)
	x, y := netns.UniqueName("pnl"), netns.UniqueName("pnl")
	testenv.Veth(t, x, y)
	for _, name := range []string{x, y} {
		require.NoError(t, ns.MoveLink(name))
		_, err := ns.Exec("ip", "link", "set", "dev", name, "mtu", strconv.Itoa(mtu))
		require.NoError(t, err)
	}
	require.NoError(t, ns.Do(func() error {
		var err error
		if a, err = linktest.OpenPacketSocket(x); err != nil {
			return err
		}
		if b, err = linktest.OpenPacketSocket(y); err != nil {
			a.Close()
		}
		return err
	}))
	assert.Equal(t, mtu, a.Info().MTU)
	return a, b
}

func TestOpenPacketSocketMissingInterface(t *testing.T) {
	_, err := linktest.OpenPacketSocket("pn-no-such-if")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pn-no-such-if")
}
