package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/testenv"
)

// TestMain lets the test binary stand in for rpcbench when a smoke test
// starts an end as a child process.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// smokeOpts are brief runs that never wait for a quiet machine nor repeat.
func smokeOpts(t *testing.T) *opts {
	t.Helper()
	o := &opts{duration: 200 * time.Millisecond, warmup: 50 * time.Millisecond, mtu: 1500, poll: "adaptive",
		pinCPU: 0, quiet: 0, noise: 1e9}
	require.NoError(t, o.check(false))
	return o
}

// smokeCases cover every client loop: rr with one and with several
// requests outstanding (4k-write and 4k-read), stream and crr.
var smokeCases = []string{"rr/4k-write/c1/d1", "rr/4k-read/c2/d4", "stream/c2", "crr/64x64/c2"}

// TestModes runs every mode briefly on every kind of test: each must
// complete operations with every echo verified and report sane figures.
// The modes that need root skip without it, unless POLARNET_REQUIRE_PRIV is
// set.
func TestModes(t *testing.T) {
	for _, name := range modeOrder {
		t.Run(name, func(t *testing.T) {
			if modes[name].priv {
				testenv.RequirePriv(t)
				testenv.RequireCommand(t, "ip")
			}
			o := smokeOpts(t)
			for _, c := range smokeCases {
				tc, err := parseTest(c)
				require.NoError(t, err)
				res, err := runOnce(t.Context(), o, modeSpec{Name: name}, tc)
				require.NoError(t, err, "%s %s", name, c)
				checkResult(t, &res, tc, modes[name].shared)
			}
		})
	}
}

// TestPinned runs the pinned variant of an in-process mode and of a mode
// with child processes.
func TestPinned(t *testing.T) {
	for _, name := range []string{"p2p-pipe", "k2k-loopback"} {
		t.Run(name, func(t *testing.T) {
			o := smokeOpts(t)
			tc, err := parseTest("rr/4k-write/c1/d1")
			require.NoError(t, err)
			res, err := runOnce(t.Context(), o, modeSpec{Name: name, Pin: true}, tc)
			require.NoError(t, err)
			checkResult(t, &res, tc, modes[name].shared)
		})
	}
}

func checkResult(t *testing.T, res *result, tc testSpec, shared bool) {
	t.Helper()
	assert.Positive(t, res.Elapsed, "measured window")
	assert.Positive(t, res.CPUTotal, "total CPU")
	if shared {
		assert.Equal(t, time.Duration(-1), res.CPUClient)
	} else {
		assert.Positive(t, res.CPUClient, "client CPU")
		assert.Positive(t, res.CPUServer, "server CPU")
		assert.Equal(t, res.CPUClient+res.CPUServer, res.CPUTotal)
	}
	var out bytes.Buffer
	printResult(&out, res, tc)
	if tc.Test == testStream {
		assert.Positive(t, res.Bytes, "stream bytes")
		assert.Greater(t, res.gbps(), 0.0)
		assert.Contains(t, out.String(), "Gbit/s")
		return
	}
	require.Positive(t, res.Ops, "operations")
	require.NotNil(t, res.Lat)
	assert.Equal(t, res.Ops, res.Lat.N, "one latency per operation")
	p50, p99, p999 := res.Lat.quantile(0.5), res.Lat.quantile(0.99), res.Lat.quantile(0.999)
	assert.Positive(t, p50)
	assert.LessOrEqual(t, p50, p99)
	assert.LessOrEqual(t, p99, p999)
	assert.LessOrEqual(t, p999, time.Duration(res.Lat.Max))
	assert.Less(t, p50, time.Second, "p50 latency")
	assert.Contains(t, out.String(), "p99.9")
}

// TestClientDetectsCorruption: a server that answers with a wrong body, a
// wrong sequence number or a short stream count fails the run.
func TestClientDetectsCorruption(t *testing.T) {
	for name, tc := range map[string]struct {
		test    string
		corrupt func(resp []byte)
	}{
		"body":     {"rr/4k-read/c1/d1", func(b []byte) { b[len(b)-1] ^= 1 }},
		"sequence": {"rr/4k-write/c1/d1", func(b []byte) { binary.LittleEndian.PutUint64(b, 7) }},
		"pipeline": {"rr/4k-write/c1/d4", func(b []byte) { b[seqLen] ^= 0x80 }},
		"crr":      {"crr/64x64/c1", func(b []byte) { b[9] ^= 1 }},
		"stream":   {"stream/c1", func(b []byte) { b[0]++ }},
	} {
		t.Run(name, func(t *testing.T) {
			spec, err := parseTest(tc.test)
			require.NoError(t, err)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go badServer(c, tc.corrupt)
				}
			}()
			dial, err := kernelNet(false).dialer(ln.Addr().String())
			require.NoError(t, err)
			g := newLoadGen(spec, dial)
			require.NoError(t, g.Connect(t.Context()))
			g.Go(10 * time.Second)
			g.Mark()
			time.Sleep(20 * time.Millisecond)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			_, err = g.Finish(ctx)
			require.Error(t, err)
			assert.ErrorIs(t, err, errCorrupt)
		})
	}
}

// badServer answers like serveConn, but passes every response (or the
// stream count) through corrupt first.
func badServer(c net.Conn, corrupt func([]byte)) {
	defer c.Close()
	h := make([]byte, helloLen)
	if _, err := io.ReadFull(c, h); err != nil {
		return
	}
	kind, req, resp, err := parseHello(h)
	if err != nil {
		return
	}
	if kind == kindStr {
		n, _ := io.Copy(io.Discard, c)
		var count [8]byte
		binary.LittleEndian.PutUint64(count[:], uint64(n))
		corrupt(count[:])
		c.Write(count[:])
		return
	}
	in, out := make([]byte, req), message(resp, seedResp)
	for seq := uint64(0); ; seq++ {
		if _, err := io.ReadFull(c, in); err != nil {
			return
		}
		binary.LittleEndian.PutUint64(out, seq)
		bad := slices.Clone(out)
		corrupt(bad)
		if _, err := c.Write(bad); err != nil {
			return
		}
	}
}

// TestServerDetectsCorruption: a corrupted request, a skipped sequence
// number or a corrupted stream byte ends the server's connection with an
// error.
func TestServerDetectsCorruption(t *testing.T) {
	reqOK := message(4096, seedReq)
	badBody := slices.Clone(reqOK)
	badBody[100] ^= 4
	badSeq := slices.Clone(reqOK)
	binary.LittleEndian.PutUint64(badSeq, 1)
	stream := pattern(streamBlock, seedStream)
	badStream := slices.Clone(stream[:1000])
	badStream[999]++
	for name, send := range map[string][]byte{
		"body":     append(hello(kindRR, 4096, 64), badBody...),
		"sequence": append(hello(kindRR, 4096, 64), badSeq...),
		"stream":   append(hello(kindStr, 0, 0), badStream...),
	} {
		t.Run(name, func(t *testing.T) {
			c, s := net.Pipe()
			errc := make(chan error, 1)
			go func() { errc <- serveConn(s, new(atomic.Uint64)) }()
			go func() {
				c.Write(send)
				c.Close()
			}()
			select {
			case err := <-errc:
				assert.ErrorIs(t, err, errCorrupt)
			case <-time.After(5 * time.Second):
				t.Fatal("server did not notice")
			}
		})
	}
}

// TestHistogram compares quantiles with exact ones from a sorted sample:
// within the 1/128 relative bucket width.
func TestHistogram(t *testing.T) {
	h := newHist()
	r := rand.New(rand.NewPCG(1, 2))
	var vals []int64
	for range 100000 {
		v := int64(r.ExpFloat64()*20000) + int64(r.IntN(300))
		vals = append(vals, v)
		h.record(time.Duration(v))
	}
	slices.Sort(vals)
	for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 1} {
		idx := max(int(float64(len(vals))*q+0.999999)-1, 0)
		exact := float64(vals[idx])
		assert.InDelta(t, exact, float64(h.quantile(q)), exact/128+1, "q=%v", q)
	}
	assert.Equal(t, time.Duration(vals[len(vals)-1]), h.quantile(1))
	for i := range histBuckets {
		low, width := bucketRange(i)
		assert.Equal(t, i, bucketOf(low), "bucket %d low", i)
		assert.Equal(t, i, bucketOf(low+width-1), "bucket %d high", i)
	}
	js, err := h.MarshalJSON()
	require.NoError(t, err)
	var back hist
	require.NoError(t, back.UnmarshalJSON(js))
	assert.Equal(t, h.Counts, back.Counts)
	assert.Equal(t, h.quantile(0.99), back.quantile(0.99))
}

func TestParse(t *testing.T) {
	for in, want := range map[string]string{
		"rr":                "rr/4k-write/c1/d1",
		"rr/4k-read/c64/d8": "rr/4k-read/c64/d8",
		"rr/d4/1024x512":    "rr/1024x512/c1/d4",
		"crr/c16":           "crr/4k-write/c16",
		"stream/c4":         "stream/c4",
	} {
		tc, err := parseTest(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, tc.String())
		again, err := parseTest(tc.String())
		require.NoError(t, err)
		assert.Equal(t, tc, again)
	}
	for _, bad := range []string{"ping", "rr/c0", "rr/4x64", "stream/d4", "crr/d2", "rr/x", "rr/4k-write/q1"} {
		_, err := parseTest(bad)
		assert.Error(t, err, bad)
	}
	m, err := parseMode("p2p-pipe:mtu=65535:poll=busy:pin")
	require.NoError(t, err)
	assert.Equal(t, modeSpec{Name: "p2p-pipe", MTU: 65535, Poll: "busy", Pin: true}, m)
	assert.Equal(t, "p2p-pipe:mtu=65535:poll=busy:pin", m.String())
	m, err = parseMode("p2k-tap:procs=4:ack=off")
	require.NoError(t, err)
	assert.Equal(t, modeSpec{Name: "p2k-tap", ACKOff: true, Procs: 4}, m)
	assert.Equal(t, "p2k-tap:ack=off:procs=4", m.String())
	again, err := parseMode(m.String())
	require.NoError(t, err)
	assert.Equal(t, m, again)
	m, err = parseMode("p2k-tap:queues=2")
	require.NoError(t, err)
	assert.Equal(t, modeSpec{Name: "p2k-tap", Queues: 2}, m)
	assert.Equal(t, "p2k-tap:queues=2", m.String())
	m, err = parseMode("vanilla-pipe:queues=2")
	require.NoError(t, err)
	assert.Equal(t, modeSpec{Name: "vanilla-pipe", Queues: 2}, m)
	m, err = parseMode("p2p-pipe:ack=on")
	require.NoError(t, err)
	assert.Equal(t, modeSpec{Name: "p2p-pipe"}, m)
	for _, bad := range []string{"p2q", "p2p-pipe:mtu=9", "k2k-veth:poll=fast", "k2k-veth:x",
		"p2p-pipe:ack=no", "p2p-pipe:procs=0", "p2p-pipe:procs=x", "k2k-veth:ack=off", "vanilla-pipe:procs=2",
		"k2k-veth:queues=2", "p2k-tap:queues=0", "k2p-tap:queues=17"} {
		_, err := parseMode(bad)
		assert.Error(t, err, bad)
	}
}

// TestModeOptions runs the pipe mode with the ACK filter off and one
// processor, and checks that segments per operation are reported for both
// polarnet ends, and for neither of two kernel ends.
func TestModeOptions(t *testing.T) {
	o := smokeOpts(t)
	tc, err := parseTest("rr/4k-write/c1/d1")
	require.NoError(t, err)
	for _, m := range []modeSpec{{Name: "p2p-pipe"}, {Name: "p2p-pipe", ACKOff: true, Procs: 1}} {
		res, err := runOnce(t.Context(), o, m, tc)
		require.NoError(t, err, m.String())
		checkResult(t, &res, tc, true)
		assert.Positive(t, res.SegsClient, "client frames")
		assert.Positive(t, res.SegsServer, "server frames")
		c, s, total := res.segsPerOp()
		assert.InDelta(t, c+s, total, 1e-9)
		var out bytes.Buffer
		printResult(&out, &res, tc)
		assert.Contains(t, out.String(), "segments/op")
	}
	t.Run("pipe queues=2", func(t *testing.T) {
		many, err := parseTest("rr/4k-write/c8/d2")
		require.NoError(t, err)
		for _, m := range []modeSpec{{Name: "p2p-pipe", Queues: 2}, {Name: "vanilla-pipe", Queues: 2}} {
			res, err := runOnce(t.Context(), o, m, many)
			require.NoError(t, err, m.String())
			checkResult(t, &res, many, true)
		}
	})
	t.Run("p2k-tap:queues=2", func(t *testing.T) {
		testenv.RequirePriv(t)
		res, err := runOnce(t.Context(), o, modeSpec{Name: "p2k-tap", Queues: 2}, tc)
		require.NoError(t, err)
		checkResult(t, &res, tc, false)
	})
	res, err := runOnce(t.Context(), o, modeSpec{Name: "k2k-loopback"}, tc)
	require.NoError(t, err)
	assert.Equal(t, int64(-1), res.SegsClient)
	assert.Equal(t, int64(-1), res.SegsServer)
	var out bytes.Buffer
	printResult(&out, &res, tc)
	assert.NotContains(t, out.String(), "segments/op")
}

// TestCompare runs the compare command end to end on the modes that need
// no root, and checks the Markdown table, the JSON and the chart.
func TestCompare(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := cli([]string{"compare", "-modes", "p2p-pipe,vanilla-pipe,p2p-pipe:mtu=65535", "-cases", "rr/4k-write/c1/d1,stream/c1",
		"-pin-cases", "", "-ref", "vanilla-pipe", "-repeat", "2", "-duration", "200ms", "-warmup", "50ms", "-quiet", "0", "-noise", "1e9", "-out", dir},
		&stdout, &stderr)
	require.Equal(t, 0, code, "stderr: %s", stderr.String())

	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(stdout.String(), string(md)), "prints the Markdown it writes")
	for _, want := range []string{"| p2p-pipe |", "| vanilla-pipe |", "| p2p-pipe:mtu=65535 |", "| segs/op |", "## Ratios against vanilla-pipe", "| rr/4k-write/c1/d1 | p2p-pipe |", "Gbit/s", "latency-rr-4k-write-c1-d1.svg"} {
		assert.Contains(t, string(md), want)
	}
	assert.NotContains(t, string(md), "Failed rows")

	var results []result
	js, err := os.ReadFile(filepath.Join(dir, "results.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(js, &results))
	assert.Len(t, results, 3*2*2)

	svg, err := os.ReadFile(filepath.Join(dir, "latency-rr-4k-write-c1-d1.svg"))
	require.NoError(t, err)
	dec := xml.NewDecoder(bytes.NewReader(svg))
	polylines := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "the chart is well-formed XML")
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			polylines++
		}
	}
	assert.Equal(t, 3, polylines, "one line per mode")
}
