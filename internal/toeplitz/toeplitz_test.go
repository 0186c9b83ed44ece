package toeplitz

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The verification examples of Microsoft's RSS specification ("Verifying
// the RSS Hash Calculation"), with MicrosoftKey: destination and source, and
// the hash over the addresses alone and over addresses and ports.
var msVectors = []struct {
	dst, src    string
	ip, withTCP uint32
}{
	{"161.142.100.80:1766", "66.9.149.187:2794", 0x323e8fc2, 0x51ccc178},
	{"65.69.140.83:4739", "199.92.111.2:14230", 0xd718262a, 0xc626b0ea},
	{"12.22.207.184:38024", "24.19.198.95:12898", 0xd2d0a5de, 0x5c2b394a},
	{"209.142.163.6:2217", "38.27.205.30:48228", 0x82989176, 0xafc7327f},
	{"202.188.127.2:1303", "153.39.163.191:44251", 0x5d1809c5, 0x10e828a2},
	{"[3ffe:2501:200:3::1]:1766", "[3ffe:2501:200:1fff::7]:2794", 0x2cc18cd5, 0x40207d3d},
	{"[ff02::1]:4739", "[3ffe:501:8::260:97ff:fe40:efab]:14230", 0x0f0c461c, 0xdde51bbf},
	{"[fe80::200:f8ff:fe21:67cf]:38024", "[3ffe:1900:4545:3:200:f8ff:fe21:67cf]:44251", 0x4b61e985, 0x02d1feef},
}

func TestMicrosoftVectors(t *testing.T) {
	k, err := NewKey(MicrosoftKey[:])
	require.NoError(t, err)
	for _, v := range msVectors {
		src, dst := netip.MustParseAddrPort(v.src), netip.MustParseAddrPort(v.dst)
		ip := Tuple(nil, src, dst, false)
		tcp := Tuple(nil, src, dst, true)
		assert.Equal(t, v.ip, Hash(MicrosoftKey[:], ip), "reference, IP only: %s -> %s", v.src, v.dst)
		assert.Equal(t, v.withTCP, Hash(MicrosoftKey[:], tcp), "reference, with ports: %s -> %s", v.src, v.dst)
		assert.Equal(t, v.ip, k.Hash(ip), "table, IP only: %s -> %s", v.src, v.dst)
		assert.Equal(t, v.withTCP, k.Hash(tcp), "table, with ports: %s -> %s", v.src, v.dst)
	}
}

// TestTableMatchesReference compares the table-driven hash with the
// bit-by-bit one on random keys and inputs.
func TestTableMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		key := make([]byte, 40+r.IntN(13))
		for i := range key {
			key[i] = byte(r.Uint32())
		}
		k, err := NewKey(key)
		require.NoError(t, err)
		assert.Equal(t, key, k.Bytes())
		in := make([]byte, r.IntN(MaxInput+1))
		for i := range in {
			in[i] = byte(r.Uint32())
		}
		require.Equal(t, Hash(key, in), k.Hash(in))
	}
}

func TestKeyLimits(t *testing.T) {
	_, err := NewKey(make([]byte, 7))
	assert.Error(t, err)
	k, err := NewKey(make([]byte, 16)) // hashes 12-byte inputs: an IPv4 4-tuple
	require.NoError(t, err)
	assert.Equal(t, 12, k.MaxInput())
	assert.NotPanics(t, func() { k.Hash(make([]byte, 12)) })
	assert.Panics(t, func() { k.Hash(make([]byte, 13)) })
}

func BenchmarkHashIPv6Tuple(b *testing.B) {
	k, _ := NewKey(MicrosoftKey[:])
	in := Tuple(nil, netip.MustParseAddrPort("[fd00:198:18::1]:40000"), netip.MustParseAddrPort("[fd00:198:18::2]:80"), true)
	for b.Loop() {
		k.Hash(in)
	}
}
