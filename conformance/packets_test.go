package conformance

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/polarnet/polarnet/internal/frame"
)

// packetScenarios look at the frames themselves, and at the protocols
// around TCP.
func packetScenarios() []*Scenario {
	return []*Scenario{
		{Name: "syn-options", Spec: Spec{WireFrames: true}, Run: func(t *T, tp *Topology, ctx context.Context) *Outcome { return synOptionsRun(t, tp, ctx, false) }},
		{Name: "syn-options/v6", Spec: Spec{WireFrames: true}, Run: func(t *T, tp *Topology, ctx context.Context) *Outcome { return synOptionsRun(t, tp, ctx, true) }},
		{Name: "isn-and-port-randomness", Run: isnAndPorts},
		{Name: "challenge-ack/server", Dirs: []Direction{StackServer}, Run: func(t *T, tp *Topology, ctx context.Context) *Outcome { return challengeACK(t, tp, ctx, true) }},
		{Name: "challenge-ack/client", Dirs: []Direction{StackClient}, Run: func(t *T, tp *Topology, ctx context.Context) *Outcome { return challengeACK(t, tp, ctx, false) }},
		{Name: "udp-echo", Run: func(t *T, tp *Topology, ctx context.Context) *Outcome { return udpEcho(t, tp, ctx, false) }},
		{Name: "udp-echo/v6", Run: func(t *T, tp *Topology, ctx context.Context) *Outcome { return udpEcho(t, tp, ctx, true) }},
		{Name: "icmp-echo-arp-ndp", Dirs: []Direction{StackServer}, Run: pingAndNeighbours},
	}
}

// synOptionsRun connects and reports the options of the SYN and SYN-ACK.
func synOptionsRun(t *T, tp *Topology, ctx context.Context, v6 bool) *Outcome {
	o := newOutcome()
	c, _ := connect(t, tp, ctx, v6, DialOptions{}, ListenOptions{})
	syn, synAck := synOptions(flowOf(tp, c))
	require.NotNil(t, syn, "no SYN captured")
	require.NotNil(t, synAck, "no SYN-ACK captured")
	for _, x := range []struct {
		name string
		tcp  *frame.TCP
	}{{"SYN", syn}, {"SYN-ACK", synAck}} {
		opt := x.tcp.Options
		o.Fact(x.name+" MSS", opt.MSS)
		o.Fact(x.name+" window scale", yesNo(opt.WindowScale >= 0))
		o.Fact(x.name+" SACK-permitted", yesNo(opt.SACKPermitted))
		o.Fact(x.name+" timestamps", yesNo(opt.Timestamps))
		o.Note("%s: mss %d wscale %d sack %v ts %v window %d", x.name, opt.MSS, opt.WindowScale, opt.SACKPermitted, opt.Timestamps, x.tcp.Window)
	}
	return o
}

// unpredictable reports whether a sequence of numbers modulo 2^bits is
// neither a constant step nor a counter creeping by small increments.
func unpredictable(xs []uint32, bits uint) (constStep, smallSteps bool) {
	mask := uint32(1)<<bits - 1
	if bits == 32 {
		mask = ^uint32(0)
	}
	constStep, smallSteps = true, true
	for i := 2; i < len(xs); i++ {
		if (xs[i]-xs[i-1])&mask != (xs[1]-xs[0])&mask {
			constStep = false
		}
	}
	for i := 1; i < len(xs); i++ {
		d := (xs[i] - xs[i-1]) & mask
		if d > 1<<(bits/2) && d < mask-1<<(bits/2) {
			smallSteps = false
		}
	}
	return constStep, smallSteps
}

// isnAndPorts opens 24 connections in a row and checks that the initial
// sequence numbers (RFC 6528) and the client's ephemeral ports (RFC 6056)
// cannot be predicted from the previous ones.
func isnAndPorts(t *T, tp *Topology, ctx context.Context) *Outcome {
	o := newOutcome()
	ln, err := tp.Server.Listen(false, ListenOptions{})
	require.NoError(t, err)
	defer ln.Close()
	var ports []uint16
	for range 24 {
		c, s, err := dialAccept(ctx, tp.Client, ln, DialOptions{})
		require.NoError(t, err)
		local, _ := portsOf(c)
		ports = append(ports, local)
		c.Close()
		s.Close()
	}
	all := segments(tp)
	var clientISN, serverISN, portSeq []uint32
	distinct := map[uint16]bool{}
	for _, p := range ports {
		syn, synAck := synOptions(flowSegments(all, p, addrOf(ln).Port()))
		require.NotNil(t, syn, "no SYN captured from port %d", p)
		require.NotNil(t, synAck, "no SYN-ACK captured to port %d", p)
		clientISN = append(clientISN, syn.Seq)
		serverISN = append(serverISN, synAck.Seq)
		portSeq = append(portSeq, uint32(p))
		distinct[p] = true
	}
	for _, x := range []struct {
		name string
		xs   []uint32
		bits uint
	}{{"client ISNs", clientISN, 32}, {"server ISNs", serverISN, 32}, {"client ports", portSeq, 16}} {
		constStep, small := unpredictable(x.xs, x.bits)
		o.Fact(x.name+" follow a constant step", yesNo(constStep))
		if x.bits == 32 {
			o.Fact(x.name+" creep by small steps", yesNo(small))
		}
	}
	o.Fact("client ports distinct", yesNo(len(distinct) == len(ports)))
	o.Note("client ports %v", ports[:8])
	return o
}

// lastSeqs returns, from the last segment each side sent on a flow, the
// next sequence number it will send and what it acknowledges.
func lastSeqs(segs []seg, fromClient bool) (sndNxt, rcvNxt uint32, ok bool) {
	for _, s := range segs {
		if s.fromClient == fromClient && s.tcp.Has(frame.FlagACK) {
			n := s.tcp.Seq + uint32(s.tcp.PayloadLen)
			if s.tcp.Has(frame.FlagFIN) || s.tcp.Has(frame.FlagSYN) {
				n++
			}
			sndNxt, rcvNxt, ok = n, s.tcp.Ack, true
		}
	}
	return sndNxt, rcvNxt, ok
}

// challengeACK forges RSTs from the victim's peer (the server's when
// victimServer, else the client's), from the peer's namespace: an
// in-window RST whose sequence number is not the one expected must be
// answered with a challenge ACK and leave the connection up (RFC 5961
// 3.2); the exact one resets it.
func challengeACK(t *T, tp *Topology, ctx context.Context, victimServer bool) *Outcome {
	o := newOutcome()
	c, s := connect(t, tp, ctx, false, DialOptions{}, ListenOptions{})
	setDeadline(ioTimeout, c, s)
	victim, peer, peerHost, victimHost := c, s, tp.Server, tp.Client
	if victimServer {
		victim, peer, peerHost, victimHost = s, c, tp.Client, tp.Server
	}
	ns := peerHost.NS()
	require.NotNil(t, ns, "the forged segments come from the peer's kernel")
	roundTrip := func(msg string) error {
		if _, err := peer.Write([]byte(msg)); err != nil {
			return err
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(victim, buf); err != nil {
			return err
		}
		if _, err := victim.Write(buf); err != nil {
			return err
		}
		_, err := io.ReadFull(peer, buf)
		return err
	}
	require.NoError(t, roundTrip("hello"))
	flow := func() []seg { return flowOf(tp, c) }
	fromVictim := !victimServer
	// The victim expects the peer's next byte at the peer's snd.nxt; wait
	// until both have acknowledged everything, so the numbers are settled.
	var rcvNxt, victimNxt uint32
	require.True(t, waitFor(ioTimeout, func() bool {
		pn, pa, ok1 := lastSeqs(flow(), !fromVictim)
		vn, va, ok2 := lastSeqs(flow(), fromVictim)
		rcvNxt, victimNxt = pn, vn
		return ok1 && ok2 && va == pn && pa == vn
	}), "the connection did not settle")
	raw, err := openRaw(ns, false)
	require.NoError(t, err)
	defer raw.close()
	src := netip.AddrPortFrom(peerHost.Addr(false), portOf(peer.LocalAddr()))
	dst := netip.AddrPortFrom(victimHost.Addr(false), portOf(victim.LocalAddr()))
	forge := func(seq uint32) error {
		f := frame.TCPFrame(frame.TCPSpec{Src: src, Dst: dst, Seq: seq, Flags: frame.FlagRST})
		return raw.send(f[frame.EthLen:], dst.Addr())
	}

	sent := time.Now()
	require.NoError(t, forge(rcvNxt+1000))
	answer := "nothing"
	waitFor(2*time.Second, func() bool {
		for _, x := range flow() {
			if x.fromClient != fromVictim || !x.at.After(sent) {
				continue
			}
			switch {
			case x.tcp.Has(frame.FlagRST):
				answer = "RST"
			case x.tcp.Has(frame.FlagACK) && x.tcp.Ack == rcvNxt && x.tcp.Seq == victimNxt && x.tcp.PayloadLen == 0:
				answer = "challenge ACK"
			default:
				continue
			}
			return true
		}
		return false
	})
	o.Fact("in-window RST answered with", answer)
	o.Fact("connection after the in-window RST", classify(roundTrip("still")))

	require.True(t, waitFor(ioTimeout, func() bool {
		pn, _, ok1 := lastSeqs(flow(), !fromVictim)
		_, va, ok2 := lastSeqs(flow(), fromVictim)
		rcvNxt = pn
		return ok1 && ok2 && va == pn
	}), "the connection did not settle")
	require.NoError(t, forge(rcvNxt))
	victim.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = victim.Read(make([]byte, 1))
	o.Fact("victim's read after the exact RST", classify(err))
	return o
}

func portOf(a net.Addr) uint16 { return uint16(a.(*net.TCPAddr).Port) }

// udpEcho sends datagrams of several sizes, fragmented ones included, to
// an echo server and checks what comes back.
func udpEcho(t *T, tp *Topology, ctx context.Context, v6 bool) *Outcome {
	o := newOutcome()
	srv, err := tp.Server.ListenUDP(v6)
	require.NoError(t, err)
	defer srv.Close()
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := srv.ReadFrom(buf)
			if err != nil {
				return
			}
			srv.WriteTo(buf[:n], from)
		}
	}()
	cli, err := tp.Client.ListenUDP(v6)
	require.NoError(t, err)
	defer cli.Close()
	to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(tp.Server.Addr(v6), srv.Port))
	largest := 1472
	if v6 {
		largest = 1452
	}
	buf := make([]byte, 65536)
	for _, n := range []int{1, 512, largest, 4000, 20000} {
		msg := bytes.Repeat([]byte{byte(n)}, n)
		copy(msg, fmt.Sprint(n))
		result := "no answer"
		// UDP may lose a datagram (the first one waits for address
		// resolution): three tries.
		for range 3 {
			if _, err := cli.WriteTo(msg, to); err != nil {
				result = classify(err)
				break
			}
			cli.SetReadDeadline(time.Now().Add(time.Second))
			m, _, err := cli.ReadFrom(buf)
			if err == nil && bytes.Equal(buf[:m], msg) {
				result = "echoed"
				break
			}
		}
		o.Fact(fmt.Sprintf("%d-byte datagram", n), result)
	}
	// A fragmented datagram's checksum covers all of it, so only the
	// sender can compute it; zero means none (IPv4) or is invalid (IPv6).
	withSum, firsts := 0, 0
	for _, p := range tp.Capture.Packets() {
		ip, ok := frame.ParseTruncated(p.Data)
		if !ok || !tp.FromClient(&p) || ip.Proto != frame.ProtoUDP || !ip.Fragment || ip.FragOffset != 0 || ip.L4+8 > len(p.Data) {
			continue
		}
		firsts++
		if p.Data[ip.L4+6] != 0 || p.Data[ip.L4+7] != 0 {
			withSum++
		}
	}
	o.Fact("client's fragmented datagrams carry a UDP checksum", yesNo(firsts > 0 && withSum == firsts))
	return o
}

// pingAndNeighbours pings the server from the client's kernel over IPv4
// and IPv6 and checks that ARP and NDP resolved the server's address to
// its MAC.
func pingAndNeighbours(t *T, tp *Topology, ctx context.Context) *Outcome {
	o := newOutcome()
	ns := tp.Client.NS()
	require.NotNil(t, ns, "the client is a kernel")
	for _, v6 := range []bool{false, true} {
		name := "IPv4"
		if v6 {
			name = "IPv6"
		}
		o.Fact(name+" echo", ping(ns, tp.Client.Addr(v6), tp.Server.Addr(v6)))
		lladdr := neighbour(ns, tp.Server.Addr(v6))
		o.Fact(name+" neighbour resolves to the server's MAC", yesNo(lladdr == tp.Server.MAC().String()))
	}
	return o
}

// ping sends ICMP echo requests from src to dst in ns (three tries) and
// says how it went.
func ping(ns interface{ Do(func() error) error }, src, dst netip.Addr) string {
	network, proto := "ip4:icmp", 1
	var typ icmp.Type = ipv4.ICMPTypeEcho
	if dst.Is6() {
		network, proto, typ = "ip6:ipv6-icmp", 58, ipv6.ICMPTypeEchoRequest
	}
	var conn *icmp.PacketConn
	if err := ns.Do(func() (err error) {
		conn, err = icmp.ListenPacket(network, src.String())
		return err
	}); err != nil {
		return classify(err)
	}
	defer conn.Close()
	payload := bytes.Repeat([]byte("polarnet"), 7)
	id := os.Getpid() & 0xffff
	for seq := 1; seq <= 3; seq++ {
		msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: seq, Data: payload}}
		b, err := msg.Marshal(nil)
		if err != nil {
			return classify(err)
		}
		if _, err := conn.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			return classify(err)
		}
		deadline := time.Now().Add(time.Second)
		buf := make([]byte, 1500)
		for time.Now().Before(deadline) {
			conn.SetReadDeadline(deadline)
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				break
			}
			reply, err := icmp.ParseMessage(proto, buf[:n])
			if err != nil || from.String() != dst.String() {
				continue
			}
			if e, ok := reply.Body.(*icmp.Echo); ok && reply.Type != typ && e.Seq == seq && bytes.Equal(e.Data, payload) {
				return "reply"
			}
		}
	}
	return "no reply"
}
