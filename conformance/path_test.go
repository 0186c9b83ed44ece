package conformance

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/link/impair"
	"github.com/polarnet/polarnet/polarnet"
)

// pathScenarios check how TCP adapts to the path: a receiver that stops,
// MTUs, MSS clamping, a long fat pipe and an unreliable one.
func pathScenarios() []*Scenario {
	out := []*Scenario{
		{Name: "flow-control/zero-window", Run: zeroWindow},
	}
	for _, mtu := range []int{576, 1280, 1500, 9000} {
		out = append(out, &Scenario{
			Name: fmt.Sprintf("mtu/%d", mtu),
			Spec: Spec{MTU: mtu, WireFrames: true},
			Run:  mtuExchange,
		})
	}
	for _, m := range [][2]int{{9000, 1500}, {1500, 9000}, {1500, 1280}} {
		out = append(out, &Scenario{
			Name: fmt.Sprintf("mtu/mismatch-%d-%d", m[0], m[1]),
			Spec: Spec{MTU: m[0], FarMTU: m[1], WireFrames: true},
			Run:  mtuExchange,
		})
	}
	out = append(out, &Scenario{
		Name: "mss-clamping/1000",
		Spec: Spec{Impair: impair.Symmetric(impair.Impairment{ClampMSS: 1000}, *seedFlag)},
		Run:  mssClamp,
	})
	lfn := int64(16 << 20)
	if testing.Short() {
		lfn = 4 << 20
	}
	out = append(out, &Scenario{
		Name:   "window-scaling/50ms-rtt-100mbit",
		Spec:   Spec{Impair: impair.Symmetric(impair.Impairment{Delay: 25 * time.Millisecond, Rate: 100e6, Limit: 1000}, *seedFlag)},
		Budget: 3 * time.Minute,
		Run:    func(t *T, tp *Topology, ctx context.Context) *Outcome { return longFatPipe(t, tp, ctx, lfn) },
	})
	lossy := int64(4 << 20)
	if testing.Short() {
		lossy = 1 << 20
	}
	for _, imp := range []struct {
		name string
		imp  impair.Impairment
	}{
		{"loss-1%", impair.Impairment{Loss: 0.01}},
		{"loss-5%", impair.Impairment{Loss: 0.05}},
		{"reorder-25%", impair.Impairment{Reorder: 0.25}},
		{"duplicate-5%", impair.Impairment{Duplicate: 0.05}},
		{"corrupt-1%", impair.Impairment{Corrupt: 0.01}},
	} {
		out = append(out, &Scenario{
			Name:   "impaired/" + imp.name,
			Spec:   Spec{Impair: impair.Symmetric(imp.imp, *seedFlag)},
			Budget: 4 * time.Minute,
			Run: func(t *T, tp *Topology, ctx context.Context) *Outcome {
				return exchange(t, tp, ctx, false, lossy, 3*time.Minute)
			},
		})
	}
	// The exchange above half-closes before the second direction: these
	// send one way only, with both ends ESTABLISHED, to tell a sender's
	// loss recovery from a receiver's acknowledgements.
	for _, upload := range []bool{true, false} {
		name := "impaired/loss-1%/download"
		if upload {
			name = "impaired/loss-1%/upload"
		}
		out = append(out, &Scenario{
			Name:   name,
			Spec:   Spec{Impair: impair.Symmetric(impair.Impairment{Loss: 0.01}, *seedFlag)},
			Budget: 4 * time.Minute,
			Run: func(t *T, tp *Topology, ctx context.Context) *Outcome {
				return oneWay(t, tp, ctx, upload, lossy, 3*time.Minute)
			},
		})
	}
	// The same upload with RACK-TLP loss recovery set explicitly, as a
	// program that chose it would.
	out = append(out, &Scenario{
		Name: "impaired/loss-1%/upload/recovery-rack",
		Dirs: []Direction{StackClient, StackStack},
		Spec: Spec{
			Impair: impair.Symmetric(impair.Impairment{Loss: 0.01}, *seedFlag),
			Stack:  func(c *polarnet.Config) { c.TCP.Recovery = polarnet.RecoveryRACK },
		},
		Budget: 4 * time.Minute,
		Run: func(t *T, tp *Topology, ctx context.Context) *Outcome {
			return oneWay(t, tp, ctx, true, lossy, 3*time.Minute)
		},
	})
	return out
}

// oneWay sends n bytes from the client to the server (upload) or back
// (download) and records the outcome and time.
func oneWay(t *T, tp *Topology, ctx context.Context, upload bool, n int64, timeout time.Duration) *Outcome {
	o, d := measure(t, tp, ctx, false, "transfer", timeout, func(c, s TCPConn) error {
		if upload {
			return sendOneWay(c, s, n, 5)
		}
		return sendOneWay(s, c, n, 5)
	})
	o.Note("%s in %v", size(n), d.Round(time.Millisecond))
	return o
}

// sendAsync sends n pattern bytes on c and half-closes it, in the
// background; the channel reports how it went.
func sendAsync(c TCPConn, n int64, seed uint64) <-chan error {
	sent := make(chan error, 1)
	go func() {
		_, err := io.Copy(c, xfer.Pattern(n, seed))
		if err == nil {
			err = c.CloseWrite()
		}
		sent <- err
	}()
	return sent
}

// sendOneWay sends n bytes from c to s, c half-closing, and returns once s
// has read them all and compared their hash.
func sendOneWay(c, s TCPConn, n int64, seed uint64) error {
	want, _, _ := xfer.Hash(xfer.Pattern(n, seed))
	sent := sendAsync(c, n, seed)
	sum, got, err := xfer.Hash(s)
	if serr := <-sent; serr != nil {
		return fmt.Errorf("send: %w", serr)
	}
	if err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	if got != n || sum != want {
		return fmt.Errorf("received %d bytes (want %d), hash match %v", got, n, sum == want)
	}
	return nil
}

// zeroWindow fills a server that stops reading: it must advertise a zero
// window, the client must probe it, and once the server reads again the
// transfer completes byte-exact.
func zeroWindow(t *T, tp *Topology, ctx context.Context) *Outcome {
	o := newOutcome()
	c, s := connect(t, tp, ctx, false, DialOptions{}, ListenOptions{})
	setDeadline(time.Minute, c, s)
	const total = 32 << 20
	want, _, _ := xfer.Hash(xfer.Pattern(total, 7))
	sent := sendAsync(c, total, 7)
	flow := func() []seg { return flowOf(tp, c) }
	var zeroAt time.Time
	closed := waitFor(20*time.Second, func() bool {
		for _, x := range flow() {
			if !x.fromClient && x.tcp.Window == 0 && !x.tcp.Has(frame.FlagSYN) && !x.tcp.Has(frame.FlagRST) {
				zeroAt = x.at
				return true
			}
		}
		return false
	})
	o.Fact("server advertised a zero window", yesNo(closed))
	probes := func() int {
		n := 0
		for _, x := range flow() {
			if x.fromClient && x.at.After(zeroAt) {
				n++
			}
		}
		return n
	}
	probed := closed && waitFor(20*time.Second, func() bool { return probes() >= 2 })
	o.Fact("client probed the closed window", yesNo(probed))
	o.Note("%d client segments while the window was closed", probes())
	resume := time.Now()
	sum, n, err := xfer.Hash(s)
	require.NoError(t, err)
	require.NoError(t, <-sent)
	assert.Equal(t, int64(total), n)
	assert.Equal(t, want, sum, "byte-exact after the window reopened")
	o.Fact("transfer after resuming", yesNo(n == total && sum == want))
	o.Elapsed("drain after resuming", time.Since(resume))
	return o
}

// synOptions returns the options of the first SYN and SYN-ACK on a flow.
func synOptions(segs []seg) (syn, synAck *frame.TCP) {
	for i := range segs {
		x := &segs[i]
		switch {
		case syn == nil && x.tcp.Flags&(frame.FlagSYN|frame.FlagACK) == frame.FlagSYN:
			syn = &x.tcp
		case synAck == nil && x.tcp.Has(frame.FlagSYN|frame.FlagACK):
			synAck = &x.tcp
		}
	}
	return syn, synAck
}

// mtuExchange exchanges 1 MiB over IPv4, and IPv6 where both MTUs allow,
// and checks the MSS each side announces and that no frame exceeds the
// receiving side's MTU.
func mtuExchange(t *T, tp *Topology, ctx context.Context) *Outcome {
	o := newOutcome()
	for _, v6 := range []bool{false, true} {
		if v6 && min(tp.NearMTU, tp.FarMTU) < 1280 {
			continue
		}
		ip := "v4 "
		if v6 {
			ip = "v6 "
		}
		c, s := connect(t, tp, ctx, v6, DialOptions{}, ListenOptions{})
		setDeadline(time.Minute, c, s)
		err := xfer.Exchange(c, s, 1<<20)
		require.NoError(t, err)
		o.Fact(ip+"exchange", classify(err))
		segs := flowOf(tp, c)
		syn, synAck := synOptions(segs)
		require.NotNil(t, syn, "no SYN captured")
		require.NotNil(t, synAck, "no SYN-ACK captured")
		// In near/far terms: the MTUs are the sides', whoever connects.
		nearMSS, farMSS := syn.Options.MSS, synAck.Options.MSS
		if !tp.ClientIsNear() {
			nearMSS, farMSS = farMSS, nearMSS
		}
		o.Fact(ip+"MSS announced by the near side", nearMSS)
		o.Fact(ip+"MSS announced by the far side", farMSS)
		over, largest := 0, [2]int{}
		for _, x := range segs {
			limit, i := tp.ServerMTU(), 0
			if !x.fromClient {
				limit, i = tp.ClientMTU(), 1
			}
			if x.len > limit+frame.EthLen {
				over++
			}
			largest[i] = max(largest[i], x.tcp.PayloadLen)
		}
		o.Fact(ip+"frames over the receiver's MTU", over)
		o.Note("%slargest payload client→server %d, server→client %d", ip, largest[0], largest[1])
	}
	return o
}

// mssClamp exchanges 1 MiB through a middlebox that clamps the MSS to 1000:
// neither side may send a larger segment.
func mssClamp(t *T, tp *Topology, ctx context.Context) *Outcome {
	o := newOutcome()
	c, s := connect(t, tp, ctx, false, DialOptions{}, ListenOptions{})
	setDeadline(time.Minute, c, s)
	err := xfer.Exchange(c, s, 1<<20)
	require.NoError(t, err)
	o.Fact("exchange", classify(err))
	largest := [2]int{}
	for _, x := range flowOf(tp, c) {
		i := 0
		if !x.fromClient {
			i = 1
		}
		largest[i] = max(largest[i], x.tcp.PayloadLen)
	}
	o.Fact("client's segments within the clamped MSS", yesNo(largest[0] <= 1000))
	o.Fact("server's segments within the clamped MSS", yesNo(largest[1] <= 1000))
	o.Note("largest payload client→server %d, server→client %d; %d SYNs clamped", largest[0], largest[1], tp.Impair.Stats().Egress.Clamped+tp.Impair.Stats().Ingress.Clamped)
	return o
}

// longFatPipe sends n bytes one way over 50 ms RTT at 100 Mbit/s: the
// bandwidth-delay product (625 KB) needs window scaling.
func longFatPipe(t *T, tp *Topology, ctx context.Context, n int64) *Outcome {
	o := newOutcome()
	c, s := connect(t, tp, ctx, false, DialOptions{}, ListenOptions{})
	setDeadline(2*time.Minute, c, s)
	start := time.Now()
	err := sendOneWay(c, s, n, 3)
	d := time.Since(start)
	require.NoError(t, err)
	o.Fact("transfer", classify(err))
	o.Elapsed("transfer", d)
	segs := flowOf(tp, c)
	syn, synAck := synOptions(segs)
	require.NotNil(t, syn, "no SYN captured")
	require.NotNil(t, synAck, "no SYN-ACK captured")
	o.Fact("SYN window scale", yesNo(syn.Options.WindowScale >= 0))
	o.Fact("SYN-ACK window scale", yesNo(synAck.Options.WindowScale >= 0))
	scale := 0
	if syn.Options.WindowScale >= 0 && synAck.Options.WindowScale >= 0 {
		scale = synAck.Options.WindowScale
	}
	peak := 0
	for _, x := range segs {
		if !x.fromClient && !x.tcp.Has(frame.FlagSYN) {
			peak = max(peak, int(x.tcp.Window)<<scale)
		}
	}
	o.Fact("server's window grew past 64 KiB", yesNo(peak > 65535))
	o.Note("%s in %v (%.1f Mbit/s); server window up to %d bytes (scale %d)", size(n), d.Round(time.Millisecond), float64(n)*8/d.Seconds()/1e6, peak, scale)
	return o
}
