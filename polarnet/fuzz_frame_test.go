package polarnet_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

// fuzzTarget is a stack with a live connection to a peer stack, and the raw
// far end of a third link into it, shared by all inputs of a fuzz worker.
type fuzzTarget struct {
	stack  *polarnet.Stack
	raw    link.Queue
	mac    tcpip.LinkAddress
	client *polarnet.TCPConn
	server *polarnet.TCPConn
}

// newFuzzTarget makes the target FuzzFrame's inputs share, closed when f
// ends (in a fuzzing worker, the body of FuzzFrame runs once per process).
func newFuzzTarget(f *testing.F) *fuzzTarget {
	// Two queues: a shard for live traffic, one fed raw bytes.
	la, raw := pipe.New(pipe.Config{Queues: 2})
	s, err := polarnet.New(polarnet.Config{Link: la, Addrs: []netip.Prefix{addrA, addrA6}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	ln, err := s.ListenTCP("tcp", netip.AddrPortFrom(addrA.Addr(), 7), 0, net.KeepAliveConfig{})
	if err != nil {
		f.Fatal(err)
	}
	// The live conn dials the stack's own address (HandleLocal), so it
	// keeps state that fuzzed segments for port 7 can reach.
	accepted := make(chan *polarnet.TCPConn, 1)
	go func() { c, _ := ln.AcceptTCP(); accepted <- c }()
	c, err := s.DialTCP(f.Context(), "tcp", netip.AddrPort{}, netip.AddrPortFrom(addrA.Addr(), 7))
	if err != nil {
		f.Fatal(err)
	}
	return &fuzzTarget{stack: s, raw: raw.Queues()[1], mac: tcpip.LinkAddress(la.Info().MAC), client: c, server: <-accepted}
}

// FuzzFrame delivers arbitrary bytes as the IP packet of a frame to a
// running stack with a live connection: the stack must neither crash nor
// lose the connection.
func FuzzFrame(f *testing.F) {
	tcp := make([]byte, header.IPv4MinimumSize+header.TCPMinimumSize)
	header.IPv4(tcp).Encode(&header.IPv4Fields{
		TotalLength: uint16(len(tcp)), Protocol: uint8(header.TCPProtocolNumber), TTL: 64,
		SrcAddr: tcpip.AddrFromSlice(addrB.Addr().AsSlice()), DstAddr: tcpip.AddrFromSlice(addrA.Addr().AsSlice()),
	})
	header.TCP(tcp[header.IPv4MinimumSize:]).Encode(&header.TCPFields{SrcPort: 1234, DstPort: 7, SeqNum: 1, DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagSyn, WindowSize: 1000})
	f.Add(uint16(header.IPv4ProtocolNumber), tcp)
	f.Add(uint16(header.IPv6ProtocolNumber), []byte{0x60, 0, 0, 0, 0, 8, 17, 64})
	f.Add(uint16(header.ARPProtocolNumber), make([]byte, 28))
	ft := newFuzzTarget(f)
	f.Fuzz(func(t *testing.T, ethType uint16, pkt []byte) {
		frame := make([]byte, header.EthernetMinimumSize+len(pkt))
		header.Ethernet(frame).Encode(&header.EthernetFields{DstAddr: ft.mac, SrcAddr: "\x02\x00\x00\x00\x00\x09", Type: tcpip.NetworkProtocolNumber(ethType)})
		copy(frame[header.EthernetMinimumSize:], pkt)
		ft.raw.WriteBurst([]link.TxFrame{{Segs: [][]byte{frame}}})

		// The live connection still answers.
		ft.client.SetDeadline(time.Now().Add(5 * time.Second))
		ft.server.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := ft.client.Write([]byte{1}); err != nil {
			t.Fatalf("live conn: %v", err)
		}
		if _, err := ft.server.Read(make([]byte, 1)); err != nil {
			t.Fatalf("live conn: %v", err)
		}
	})
}
