package capture_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/capture"
	"github.com/polarnet/polarnet/link/linktest"
	"github.com/polarnet/polarnet/link/pipe"
)

func TestSuite(t *testing.T) {
	linktest.TestLinkPair(t, func(*testing.T) (link.Link, link.Link) {
		a, b := pipe.New(pipe.Config{Queues: 2})
		return capture.New(a, capture.NewBuffer(capture.BufferConfig{Snaplen: 64})), b
	})
}

func testFrame(size int, fill byte) []byte {
	f := bytes.Repeat([]byte{fill}, size)
	binary.BigEndian.PutUint16(f[12:], 0x88B5)
	return f
}

func TestRecordsBothDirections(t *testing.T) {
	a, b := pipe.New(pipe.Config{})
	buf := capture.NewBuffer(capture.BufferConfig{Snaplen: 100, Limit: 3})
	c := capture.New(a, buf)
	defer c.Close()
	defer b.Close()

	out := testFrame(300, 1)
	off := link.TxOffload{NeedsChecksum: true, ChecksumStart: 34, ChecksumOffset: 16}
	n, err := c.Queues()[0].WriteBurst([]link.TxFrame{{Segs: [][]byte{out[:50], out[50:]}, Offload: off}})
	require.NoError(t, err)
	require.Equal(t, 1, n)

	in := testFrame(80, 2)
	_, err = b.Queues()[0].WriteBurst([]link.TxFrame{{Segs: [][]byte{in}}, {Segs: [][]byte{in}}, {Segs: [][]byte{in}}})
	require.NoError(t, err)
	rx := make([]link.RxFrame, 4)
	for i := range rx {
		rx[i].Buf = make([]byte, 1514)
	}
	got := 0
	for i := 0; got < 3 && i < 1000; i++ {
		n, err := c.Queues()[0].ReadBurst(rx)
		require.NoError(t, err)
		got += n
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	require.Equal(t, 3, got)

	pkts := buf.Packets()
	require.Len(t, pkts, 3, "the limit keeps the first 3")
	assert.Equal(t, 1, buf.Dropped())
	assert.Equal(t, capture.Out, pkts[0].Dir)
	assert.Equal(t, 300, pkts[0].Len)
	assert.Equal(t, out[:100], pkts[0].Data, "snapped at 100 bytes")
	assert.Equal(t, off, pkts[0].Offload)
	assert.Equal(t, capture.In, pkts[1].Dir)
	assert.Equal(t, in, pkts[1].Data)
	assert.True(t, pkts[1].ChecksumValid, "pipes mark frames ChecksumValid")

	path := filepath.Join(t.TempDir(), "x.pcap")
	require.NoError(t, buf.WriteFile(path))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	back, err := capture.ReadPcap(f)
	require.NoError(t, err)
	require.Len(t, back, 3)
	for i := range back {
		assert.Equal(t, pkts[i].Data, back[i].Data)
		assert.Equal(t, pkts[i].Len, back[i].Len)
		assert.True(t, pkts[i].Time.Equal(back[i].Time))
	}

	buf.Reset()
	assert.Empty(t, buf.Packets())
	assert.Zero(t, buf.Dropped())
}

func TestWriter(t *testing.T) {
	var out bytes.Buffer
	w, err := capture.NewWriter(&out, 32)
	require.NoError(t, err)
	now := time.Unix(1700000000, 123456789)
	w.Record(&capture.Packet{Time: now, Dir: capture.In, Data: testFrame(60, 3), Len: 60})
	w.Record(&capture.Packet{Time: now, Dir: capture.Out, Data: testFrame(20, 4), Len: 20})
	require.NoError(t, w.Flush())
	// The file header as tcpdump expects it: nanosecond magic, v2.4,
	// snaplen, Ethernet.
	hdr := out.Bytes()[:24]
	assert.Equal(t, []byte{0x4d, 0x3c, 0xb2, 0xa1, 2, 0, 4, 0}, hdr[:8])
	assert.EqualValues(t, 32, binary.LittleEndian.Uint32(hdr[16:]))
	assert.EqualValues(t, 1, binary.LittleEndian.Uint32(hdr[20:]))
	pkts, err := capture.ReadPcap(&out)
	require.NoError(t, err)
	require.Len(t, pkts, 2)
	assert.Len(t, pkts[0].Data, 32)
	assert.Equal(t, 60, pkts[0].Len)
	assert.True(t, now.Equal(pkts[0].Time))
	assert.Len(t, pkts[1].Data, 20)
}

func TestReadPcapRejects(t *testing.T) {
	_, err := capture.ReadPcap(bytes.NewReader(make([]byte, 24)))
	assert.ErrorContains(t, err, "not a pcap")
	_, err = capture.ReadPcap(bytes.NewReader(nil))
	assert.Error(t, err)
}
