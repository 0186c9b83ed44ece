package tap

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/testenv"
	"github.com/polarnet/polarnet/link"
)

// openTAP opens a link on a uniquely named device and closes it at cleanup.
func openTAP(t testing.TB, cfg Config) *Link {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = netns.UniqueName("pntap")
	}
	l, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// newNS returns a fresh namespace where IPv6 is off, so that no router
// solicitation or the like reaches the links the test plugs in.
func newNS(t testing.TB) *netns.NS {
	t.Helper()
	ns := testenv.NewNS(t)
	sysctl(t, ns, "net/ipv6/conf/all/disable_ipv6", "1")
	sysctl(t, ns, "net/ipv6/conf/default/disable_ipv6", "1")
	return ns
}

// plug moves the kernel side of l into ns (where netns brings it up), gives
// it address 198.18.subnet.1/24 and makes 198.18.subnet.2 the polarnet side
// with a permanent neighbour entry. It returns the kernel side's MAC address.
func plug(t *testing.T, ns *netns.NS, l *Link, subnet int) net.HardwareAddr {
	t.Helper()
	name := l.Info().Name
	require.NoError(t, ns.MoveLink(name))
	for _, c := range [][]string{
		{"ip", "addr", "add", fmt.Sprintf("198.18.%d.1/24", subnet), "dev", name},
		{"ip", "neigh", "add", fmt.Sprintf("198.18.%d.2", subnet), "lladdr", l.Info().MAC.String(), "dev", name, "nud", "permanent"},
	} {
		_, err := ns.Exec(c...)
		require.NoError(t, err)
	}
	var mac net.HardwareAddr
	require.NoError(t, ns.Do(func() error {
		ifi, err := net.InterfaceByName(name)
		if err == nil {
			mac = ifi.HardwareAddr
		}
		return err
	}))
	return mac
}

// kernelAddr and linkAddr are the addresses plug gives the kernel side and
// the polarnet side on a subnet.
func kernelAddr(subnet int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(subnet), 1}) }
func linkAddr(subnet int) netip.Addr   { return netip.AddrFrom4([4]byte{198, 18, byte(subnet), 2}) }

// sysctl writes a value under /proc/sys/ inside ns.
func sysctl(t testing.TB, ns *netns.NS, key, value string) {
	t.Helper()
	require.NoError(t, ns.Do(func() error {
		return os.WriteFile("/proc/sys/"+key, []byte(value), 0)
	}))
}

// sendUDP makes the kernel in ns send a datagram from srcPort (0: any) to
// dst.
func sendUDP(t *testing.T, ns *netns.NS, srcPort int, dst netip.AddrPort, payload []byte) {
	t.Helper()
	require.NoError(t, ns.Do(func() error {
		c, err := net.DialUDP("udp4", &net.UDPAddr{Port: srcPort}, net.UDPAddrFromAddrPort(dst))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write(payload)
		return err
	}))
}

// receive reads frames from q, giving each to accept, until accept returns
// true or timeout passes (then the test fails).
func receive(t *testing.T, q link.Queue, frameSize int, timeout time.Duration, accept func(frame []byte, checksumValid bool) (done bool)) {
	t.Helper()
	timer := time.AfterFunc(timeout, q.Interrupt)
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	frames := make([]link.RxFrame, 8)
	for i := range frames {
		frames[i].Buf = make([]byte, frameSize)
	}
	for time.Now().Before(deadline) {
		n, err := q.ReadBurst(frames)
		require.NoError(t, err)
		for _, f := range frames[:n] {
			if accept(f.Buf[:f.Len], f.ChecksumValid) {
				return
			}
		}
		if n == 0 {
			require.NoError(t, q.WaitRead())
		}
	}
	t.Fatalf("no wanted frame within %v", timeout)
}

// Frame building and checking for tests, on IPv4 and TCP.

const (
	ipv4HdrLen = 20
	tcpHdrLen  = 20
	tcpv4Start = ethHdrLen + ipv4HdrLen // offset of the TCP header
)

// tcpv4 describes one IPv4 TCP frame.
type tcpv4 struct {
	dstMAC, srcMAC net.HardwareAddr
	src, dst       netip.Addr
	sport, dport   uint16
	seq            uint32
	payload        []byte
}

// frame returns the frame. With partial, its TCP checksum holds only the
// pseudo-header sum (with the TCP length), as the engine leaves it for
// checksum offload; otherwise it is complete.
func (p *tcpv4) frame(partial bool) []byte {
	b := make([]byte, tcpv4Start+tcpHdrLen+len(p.payload))
	copy(b[0:], p.dstMAC)
	copy(b[6:], p.srcMAC)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[ethHdrLen:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	binary.BigEndian.PutUint16(ip[4:], 1)      // ID
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	ip[8], ip[9] = 64, 6
	copy(ip[12:], p.src.AsSlice())
	copy(ip[16:], p.dst.AsSlice())
	binary.BigEndian.PutUint16(ip[10:], ^fold(sum(ip[:ipv4HdrLen], 0)))
	tcp := ip[ipv4HdrLen:]
	binary.BigEndian.PutUint16(tcp[0:], p.sport)
	binary.BigEndian.PutUint16(tcp[2:], p.dport)
	binary.BigEndian.PutUint32(tcp[4:], p.seq)
	tcp[12] = tcpHdrLen / 4 << 4
	tcp[13] = 0x18 // PSH|ACK
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	copy(tcp[tcpHdrLen:], p.payload)
	seed := pseudoSum(ip)
	if partial {
		binary.BigEndian.PutUint16(tcp[16:], fold(seed))
	} else {
		binary.BigEndian.PutUint16(tcp[16:], ^fold(sum(tcp, seed)))
	}
	return b
}

// udpv4Frame returns an IPv4 UDP frame with complete checksums.
func udpv4Frame(dstMAC, srcMAC net.HardwareAddr, src, dst netip.AddrPort, payload []byte) []byte {
	b := make([]byte, ethHdrLen+ipv4HdrLen+8+len(payload))
	copy(b[0:], dstMAC)
	copy(b[6:], srcMAC)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[ethHdrLen:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	ip[8], ip[9] = 64, 17
	copy(ip[12:], src.Addr().AsSlice())
	copy(ip[16:], dst.Addr().AsSlice())
	binary.BigEndian.PutUint16(ip[10:], ^fold(sum(ip[:ipv4HdrLen], 0)))
	udp := ip[ipv4HdrLen:]
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], payload)
	binary.BigEndian.PutUint16(udp[6:], ^fold(sum(udp, pseudoSum(ip))))
	return b
}

// udpv4Payload returns the payload of frame if it is an IPv4 UDP datagram to
// port dport. Unless partial (a checksum-partial frame), it checks the UDP
// checksum.
func udpv4Payload(t *testing.T, frame []byte, dport uint16, partial bool) ([]byte, bool) {
	t.Helper()
	if len(frame) < ethHdrLen+ipv4HdrLen+8 || binary.BigEndian.Uint16(frame[12:]) != 0x0800 || frame[ethHdrLen+9] != 17 {
		return nil, false
	}
	ip := frame[ethHdrLen:]
	udp := ip[int(ip[0]&0xf)*4:]
	if binary.BigEndian.Uint16(udp[2:]) != dport {
		return nil, false
	}
	if !partial {
		require.Equal(t, uint16(0xffff), fold(sum(udp, pseudoSum(ip))), "UDP checksum")
	}
	return udp[8:], true
}

// sum adds b to the one's complement sum acc, unfolded.
func sum(b []byte, acc uint32) uint32 {
	for len(b) >= 2 {
		acc += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint32(b[0]) << 8
	}
	return acc
}

// fold folds an unfolded one's complement sum to 16 bits.
func fold(acc uint32) uint16 {
	for acc > 0xffff {
		acc = acc>>16 + acc&0xffff
	}
	return uint16(acc)
}

// pseudoSum is the sum of the transport pseudo-header of the IPv4 packet ip,
// with the transport length its header gives.
func pseudoSum(ip []byte) uint32 {
	acc := sum(ip[12:20], uint32(ip[9]))
	return acc + uint32(binary.BigEndian.Uint16(ip[2:])-uint16(ip[0]&0xf)*4)
}

// parsedTCPv4 is what checkTCPv4 found in a valid frame.
type parsedTCPv4 struct {
	ttl          uint8
	sport, dport uint16
	seq          uint32
	payload      []byte
}

// parseTCPv4 returns the TCP segment in frame, with ok false when frame is
// not IPv4 TCP. It checks the lengths, the IPv4 header checksum and, unless
// partial (the frame has a checksum-partial TCP checksum), the TCP checksum.
func parseTCPv4(t *testing.T, frame []byte, partial bool) (parsedTCPv4, bool) {
	t.Helper()
	if len(frame) < tcpv4Start+tcpHdrLen || binary.BigEndian.Uint16(frame[12:]) != 0x0800 || frame[ethHdrLen+9] != 6 {
		return parsedTCPv4{}, false
	}
	ip := frame[ethHdrLen:]
	ihl := int(ip[0]&0xf) * 4
	require.Equal(t, len(ip), int(binary.BigEndian.Uint16(ip[2:])), "IP total length")
	require.Equal(t, uint16(0xffff), fold(sum(ip[:ihl], 0)), "IPv4 header checksum")
	tcp := ip[ihl:]
	if !partial {
		require.Equal(t, uint16(0xffff), fold(sum(tcp, pseudoSum(ip))), "TCP checksum")
	}
	return parsedTCPv4{
		ttl:     ip[8],
		sport:   binary.BigEndian.Uint16(tcp[0:]),
		dport:   binary.BigEndian.Uint16(tcp[2:]),
		seq:     binary.BigEndian.Uint32(tcp[4:]),
		payload: tcp[int(tcp[12]>>4)*4:],
	}, true
}
