package rdma

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/link"
)

var (
	stack4 = netip.MustParseAddr("198.18.0.2")
	stack6 = netip.MustParseAddr("fd00:198:18::2")
)

func TestPlanFlows(t *testing.T) {
	lines := func(rules []flowRule) []string {
		var out []string
		for _, r := range rules {
			out = append(out, r.String())
		}
		return out
	}
	assert.Equal(t, []string{
		"dst 02:52:44:4d:41:02 type 0x0800 ip 198.18.0.2 tcp -> tcp4 (priority 0)",
		"dst 02:52:44:4d:41:02 type 0x0800 ip 198.18.0.2 udp -> udp4 (priority 0)",
		"dst 02:52:44:4d:41:02 type 0x0800 ip 198.18.0.2 -> other (priority 1)",
		"dst 02:52:44:4d:41:02 type 0x86dd ip fd00:198:18::2 tcp -> tcp6 (priority 0)",
		"dst 02:52:44:4d:41:02 type 0x86dd ip fd00:198:18::2 udp -> udp6 (priority 0)",
		"dst 02:52:44:4d:41:02 type 0x86dd ip fd00:198:18::2 -> other (priority 1)",
		"dst 02:52:44:4d:41:02 type 0x0806 -> other (priority 1, the kernel gets a copy)",
		"dst ff:ff:ff:ff:ff:ff type 0x0806 -> other (priority 1, the kernel gets a copy)",
		"dst 33:33:ff:00:00:02 type 0x86dd -> other (priority 1, the kernel gets a copy)",
	}, lines(planFlows(macN(2), macN(2), []netip.Addr{stack4, stack6})), "sharing the interface's MAC")

	assert.Equal(t, []string{
		"dst 02:52:44:4d:41:82 type 0x0800 tcp -> tcp4 (priority 0)",
		"dst 02:52:44:4d:41:82 type 0x0800 udp -> udp4 (priority 0)",
		"dst 02:52:44:4d:41:82 type 0x86dd tcp -> tcp6 (priority 0)",
		"dst 02:52:44:4d:41:82 type 0x86dd udp -> udp6 (priority 0)",
		"dst 02:52:44:4d:41:82 -> other (priority 1)",
		"dst ff:ff:ff:ff:ff:ff type 0x0806 -> other (priority 1, the kernel gets a copy)",
	}, lines(planFlows(macN(0x82), macN(2), []netip.Addr{stack4})), "a MAC of its own")
}

// TestFlowsSteerOnlyOurTraffic sends frames of every kind to a link sharing
// its interface's MAC with the kernel: the link gets the frames for its
// addresses, the kernel everything else, and both get broadcast ARP and the
// neighbour solicitations for the link's IPv6 address.
func TestFlowsSteerOnlyOurTraffic(t *testing.T) {
	w := newFakeWire(false)
	a := newFakeLink(t, w, 1, ownMAC(Config{}, 1), nil)
	b := newFakeLink(t, w, 2, Config{Queues: 2, Addrs: []netip.Addr{stack4, stack6}}, nil)
	require.Equal(t, macN(2), b.Info().MAC, "the interface's MAC by default")
	require.True(t, b.Setup().RSS)

	peer4 := netip.MustParseAddrPort("198.18.0.1:40000")
	peer6 := netip.MustParseAddrPort("[fd00:198:18::1]:40000")
	tcp := func(dst netip.AddrPort, src netip.AddrPort) []byte {
		return frame.TCPFrame(frame.TCPSpec{SrcMAC: a.Info().MAC, DstMAC: b.Info().MAC, Src: src, Dst: dst, Flags: frame.FlagSYN})
	}
	arp := make([]byte, 42)
	copy(arp, broadcastMAC)
	copy(arp[6:], a.Info().MAC)
	arp[12], arp[13] = 0x08, 0x06
	ns := make([]byte, 14+40+24)
	copy(ns, solicitedNodeMAC(stack6))
	copy(ns[6:], a.Info().MAC)
	ns[12], ns[13] = 0x86, 0xdd
	ns[14], ns[14+6], ns[14+7] = 0x60, 58, 255
	putU16(ns[14+4:], 24)
	other := make([]byte, 60)
	copy(other, b.Info().MAC)
	other[12], other[13] = 0x88, 0xb5

	for _, c := range []struct {
		name         string
		f            []byte
		link, kernel bool
	}{
		{"tcp4 to the link", tcp(netip.AddrPortFrom(stack4, 80), peer4), true, false},
		{"udp4 to the link", udpFrame(a.Info().MAC, b.Info().MAC, peer4, netip.AddrPortFrom(stack4, 53), 20), true, false},
		{"tcp4 to the kernel's address", tcp(netip.MustParseAddrPort("198.18.0.99:80"), peer4), false, true},
		{"tcp6 to the link", tcp(netip.AddrPortFrom(stack6, 80), peer6), true, false},
		{"tcp6 to the kernel's address", tcp(netip.MustParseAddrPort("[fd00:198:18::99]:80"), peer6), false, true},
		{"broadcast ARP", arp, true, true},
		{"neighbour solicitation", ns, true, true},
		{"another EtherType", other, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := b.dev.kernel
			write(t, a.Queues()[0], c.f)
			got := 0
			for _, q := range b.Queues() {
				rx := []link.RxFrame{{Buf: make([]byte, b.Info().RxFrameSize)}}
				n, err := q.ReadBurst(rx)
				require.NoError(t, err)
				if n == 1 {
					got++
					assert.Equal(t, c.f, rx[0].Buf[:rx[0].Len])
				}
			}
			assert.Equal(t, c.link, got == 1, "the link receives it")
			assert.Equal(t, c.kernel, b.dev.kernel == before+1, "the kernel receives it")
		})
	}
}

// TestRSSSpread checks that RxQueue predicts the queue on which the device
// delivers each TCP flow, and that flows spread over every queue.
func TestRSSSpread(t *testing.T) {
	w := newFakeWire(true)
	a := newFakeLink(t, w, 1, ownMAC(Config{}, 1), nil)
	b := newFakeLink(t, w, 2, Config{Queues: 4, Addrs: []netip.Addr{stack4, stack6}}, nil)
	require.True(t, b.Setup().RSS)
	assert.Equal(t, 128, b.Setup().RSSTable)
	type flow struct{ local, remote netip.AddrPort }
	var flows []flow
	for i := range 64 {
		for _, pair := range [][2]string{{"198.18.0.2:80", "198.18.0.1"}, {"[fd00:198:18::2]:443", "fd00:198:18::1"}} {
			local := netip.MustParseAddrPort(pair[0])
			flows = append(flows, flow{local, netip.AddrPortFrom(netip.MustParseAddr(pair[1]), uint16(30000+i*7))})
		}
	}
	for _, f := range flows {
		write(t, a.Queues()[0], frame.TCPFrame(frame.TCPSpec{SrcMAC: a.Info().MAC, DstMAC: b.Info().MAC, Src: f.remote, Dst: f.local, Flags: frame.FlagSYN}))
	}
	perQueue := make([]int, 4)
	total := 0
	deadline := time.Now().Add(5 * time.Second)
	for total < len(flows) && time.Now().Before(deadline) {
		for i, q := range b.Queues() {
			rx := []link.RxFrame{{Buf: make([]byte, b.Info().RxFrameSize)}}
			n, err := q.ReadBurst(rx)
			require.NoError(t, err)
			if n == 0 {
				continue
			}
			p, ok := frame.Parse(rx[0].Buf[:rx[0].Len])
			require.True(t, ok)
			seg, ok := frame.ParseTCP(rx[0].Buf[:rx[0].Len], p)
			require.True(t, ok)
			local, remote := netip.AddrPortFrom(p.Dst, seg.DstPort), netip.AddrPortFrom(p.Src, seg.SrcPort)
			require.Equal(t, i, b.RxQueue(local, remote), "flow %v -> %v", remote, local)
			perQueue[i]++
			total++
		}
	}
	require.Equal(t, len(flows), total)
	for i, n := range perQueue {
		assert.NotZero(t, n, "queue %d got no flow: %v", i, perQueue)
	}

	one := newFakeLink(t, w, 3, Config{Queues: 2, DisableRSS: true, Addrs: []netip.Addr{netip.MustParseAddr("198.18.0.3")}}, nil)
	assert.False(t, one.Setup().RSS)
	assert.Equal(t, -1, one.RxQueue(flows[0].local, flows[0].remote), "no spread: the engine steers in software")
	assert.True(t, strings.HasPrefix(one.Setup().FlowRules[0], "dst 02:52:44:4d:41:03"))
}
