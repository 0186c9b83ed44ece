package dialer_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/polarnet/polarnet/dialer"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

// serveDNS answers A queries for name with addr, over UDP on the stack.
func serveDNS(t *testing.T, st *polarnet.Stack, name string, addr netip.Addr) netip.AddrPort {
	pc, err := st.ListenUDP("udp", netip.MustParseAddrPort("198.18.0.2:53"))
	require.NoError(t, err)
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			var msg dnsmessage.Message
			if msg.Unpack(buf[:n]) != nil || len(msg.Questions) != 1 {
				continue
			}
			q := msg.Questions[0]
			msg.Header.Response, msg.Header.Authoritative = true, true
			if q.Name.String() == name && q.Type == dnsmessage.TypeA {
				msg.Answers = []dnsmessage.Resource{{
					Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60},
					Body:   &dnsmessage.AResource{A: addr.As4()},
				}}
			} else if q.Type != dnsmessage.TypeAAAA {
				msg.Header.RCode = dnsmessage.RCodeNameError
			}
			out, err := msg.Pack()
			if err == nil {
				pc.WriteToUDPAddrPort(out, from)
			}
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr).AddrPort()
}

// TestResolveThroughTheStack dials a host name whose DNS server is only
// reachable through the stack.
func TestResolveThroughTheStack(t *testing.T) {
	la, lb := pipe.New(pipe.Config{})
	server := newStack(t, lb, "198.18.0.2/24")
	dns := serveDNS(t, server, "svc.polarnet.test.", netip.MustParseAddr("198.18.0.2"))
	client, err := polarnet.New(polarnet.Config{Link: la, Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.0.1/24")}, DNS: []netip.AddrPort{dns}})
	require.NoError(t, err)
	defer client.Close()

	ln, err := server.ListenTCP("tcp", netip.MustParseAddrPort("198.18.0.2:8080"), 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	d := dialer.Dialer{Stack: client}
	c, err := d.Dial("tcp", "svc.polarnet.test:8080")
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, "198.18.0.2:8080", c.RemoteAddr().String())

	_, err = d.Dial("tcp", "missing.polarnet.test:8080")
	var dnsErr *net.DNSError
	require.ErrorAs(t, err, &dnsErr)
	assert.True(t, dnsErr.IsNotFound)
}
