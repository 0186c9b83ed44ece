package dpdk

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestIsolateRules checks the rte_flow rules isolated mode asks for.
func TestIsolateRules(t *testing.T) {
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	v4, v6 := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("fd00:198:18::2")
	rules := isolateRules(mac, []netip.Addr{v4, v6, netip.MustParseAddr("::ffff:198.18.0.3")}, 4)
	var got []string
	for _, r := range rules {
		got = append(got, r.String())
	}
	assert.Equal(t, []string{
		"eth dst 02:00:00:00:00:01 / ipv4 dst 198.18.0.2 -> rss queues 0-3",
		"eth / arp_eth_ipv4 tpa 198.18.0.2 -> queue 0",
		"eth dst 02:00:00:00:00:01 / ipv6 dst fd00:198:18::2 -> rss queues 0-3",
		"eth / ipv6 dst ff02::1:ff00:2 -> queue 0",
		"eth dst 02:00:00:00:00:01 / ipv4 dst 198.18.0.3 -> rss queues 0-3",
		"eth / arp_eth_ipv4 tpa 198.18.0.3 -> queue 0",
	}, got)

	one := isolateRules(mac, []netip.Addr{v4}, 1)
	assert.Equal(t, "eth dst 02:00:00:00:00:01 / ipv4 dst 198.18.0.2 -> queue 0", one[0].String())
}

func TestSolicitedNode(t *testing.T) {
	assert.Equal(t, netip.MustParseAddr("ff02::1:ff21:67cf"), solicitedNode(netip.MustParseAddr("fe80::200:f8ff:fe21:67cf")))
}

func TestMemifBells(t *testing.T) {
	p := memifBells("role=server,socket-abstract=no,socket=/run/pn/m.sock,id=3")
	assert.Equal(t, "server", p.role)
	assert.Equal(t, "client", p.peer)
	assert.Equal(t, "/run/pn/m.sock.3.pnbell", p.shm)
	assert.Equal(t, "/run/pn/m.sock.3.pnbell-client-1", p.bell(p.peer, 1))

	a := memifBells("socket=/run/pn/m.sock")
	assert.Equal(t, "client", a.role, "memif's default role")
	assert.Contains(t, a.shm, "/dev/shm/polarnet-memif-")
	assert.Equal(t, "@", a.bell("server", 0)[:1], "abstract, like the memif socket")
	assert.NotEqual(t, a.shm, memifBells("socket=/run/pn/m.sock,id=1").shm, "ids share a socket, not a bell")

	assert.Equal(t, 0, memifBellFlag("server", 0))
	assert.Equal(t, 64, memifBellFlag("server", 1))
	assert.Equal(t, memifBellQueues*64, memifBellFlag("client", 0))
	assert.Less(t, memifBellFlag("client", memifBellQueues-1), memifBellSize)
}
