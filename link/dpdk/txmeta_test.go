package dpdk

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/link"
)

func TestOffloadMeta(t *testing.T) {
	src, dst := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.1")
	offloading := &portPlan{txChecksum: true, tso: true}

	none, err := offloadMeta(&link.TxOffload{}, nil, 60, offloading, false)
	require.NoError(t, err)
	assert.Zero(t, none)

	// TCP checksum offload: the engine's pseudo-header sum stays.
	f := l4Frame(src, dst, frame.ProtoTCP, make([]byte, 1000), true)
	before := append([]byte(nil), f...)
	csum := &link.TxOffload{NeedsChecksum: true, ChecksumStart: 34, ChecksumOffset: 16}
	m, err := offloadMeta(csum, f[:64], len(f), offloading, false)
	require.NoError(t, err)
	assert.Equal(t, txMeta{olFlags: mbufTxIPv4 | mbufTxTCPCksum, l2: 14, l3: 20, l4: 20}, m)
	assert.Equal(t, before, f, "nothing rewritten")

	// UDP over IPv6.
	f6 := l4Frame(netip.MustParseAddr("fd00:198:18::2"), netip.MustParseAddr("fd00:198:18::1"), frame.ProtoUDP, make([]byte, 100), true)
	m, err = offloadMeta(&link.TxOffload{NeedsChecksum: true, ChecksumStart: 54, ChecksumOffset: 6}, f6, len(f6), offloading, false)
	require.NoError(t, err)
	assert.Equal(t, txMeta{olFlags: mbufTxIPv6 | mbufTxUDPCksum, l2: 14, l3: 40, l4: 8}, m)

	// TSO: segmentation flags, the pseudo-header sum without the length,
	// and a zero IPv4 header checksum for the PMD to redo per segment.
	big := l4Frame(src, dst, frame.ProtoTCP, make([]byte, 20000), true)
	tso := &link.TxOffload{NeedsChecksum: true, ChecksumStart: 34, ChecksumOffset: 16, GSO: link.GSOTCPv4, GSOSize: 1448, HeaderLen: 54}
	m, err = offloadMeta(tso, big[:64], len(big), offloading, false)
	require.NoError(t, err)
	assert.Equal(t, txMeta{olFlags: mbufTxIPv4 | mbufTxTCPCksum | mbufTxTCPSeg | mbufTxIPCksum, l2: 14, l3: 20, l4: 20, tsoSegsz: 1448}, m)
	want, _ := tsoPseudoHeaderSum(big, 34)
	assert.Equal(t, want, binary.BigEndian.Uint16(big[34+16:]))
	assert.Zero(t, binary.BigEndian.Uint16(big[14+10:]))

	// SkipChecksums leaves checksums partial, unflagged.
	m, err = offloadMeta(csum, f[:64], len(f), &portPlan{}, true)
	require.NoError(t, err)
	assert.Zero(t, m)

	// Asking for what the link did not offer, or nonsense, is an error.
	_, err = offloadMeta(csum, f[:64], len(f), &portPlan{}, false)
	assert.ErrorIs(t, err, link.ErrNotSupported)
	_, err = offloadMeta(tso, big[:64], len(big), &portPlan{txChecksum: true}, false)
	assert.ErrorIs(t, err, link.ErrNotSupported)
	_, err = offloadMeta(&link.TxOffload{NeedsChecksum: true, ChecksumStart: 34, ChecksumOffset: 9}, f[:64], len(f), offloading, false)
	assert.Error(t, err)
	_, err = offloadMeta(&link.TxOffload{NeedsChecksum: true, ChecksumStart: 500, ChecksumOffset: 16}, f[:64], len(f), offloading, false)
	assert.Error(t, err)
}
