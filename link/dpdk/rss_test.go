package dpdk

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/toeplitz"
)

func TestRSSSteerer(t *testing.T) {
	reta := make([]uint16, 128)
	for i := range reta {
		reta[i] = uint16(i % 4)
	}
	s, err := newRSSSteerer(toeplitz.MicrosoftKey[:], rssWanted, reta, 4)
	require.NoError(t, err)

	// The first vector of the Microsoft specification: a frame from
	// 66.9.149.187:2794 to 161.142.100.80:1766 hashes to 0x51ccc178, whose
	// low 7 bits (0x78 = 120) pick RETA entry 120: queue 0.
	local, remote := netip.MustParseAddrPort("161.142.100.80:1766"), netip.MustParseAddrPort("66.9.149.187:2794")
	assert.Equal(t, int(reta[0x51ccc178%128]), s.RxQueue(local, remote))

	// A dialing shard finds a local port for every queue.
	server := netip.MustParseAddrPort("[fd00:198:18::1]:443")
	found := map[int]bool{}
	for port := uint16(40000); port < 40100; port++ {
		q := s.RxQueue(netip.AddrPortFrom(netip.MustParseAddr("fd00:198:18::2"), port), server)
		assert.Less(t, q, 4)
		found[q] = true
	}
	assert.Len(t, found, 4)

	_, err = newRSSSteerer(toeplitz.MicrosoftKey[:], rssIPv4|rssIPv6, reta, 4)
	assert.Error(t, err, "without ports in the hash a local port cannot choose the queue")
	_, err = newRSSSteerer(toeplitz.MicrosoftKey[:], rssWanted, []uint16{0, 5}, 4)
	assert.Error(t, err)
	_, err = newRSSSteerer(toeplitz.MicrosoftKey[:], rssWanted, nil, 4)
	assert.Error(t, err)
	_, err = newRSSSteerer(make([]byte, 20), rssWanted, reta, 4)
	assert.Error(t, err, "too short for IPv6")
}
