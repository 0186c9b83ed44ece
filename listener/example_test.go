package listener_test

import (
	"fmt"
	"log"
	"net"
	"net/netip"
	"strconv"

	"github.com/polarnet/polarnet/dialer"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/listener"
	"github.com/polarnet/polarnet/polarnet"
)

// net.Listen's code on the default stack, which the POLARNET_* variables
// make or, as here, polarnet.SetDefault: its link is an in-memory pipe to a
// client stack. A wildcard listen accepts from the stack's link and from the
// kernel's loopback, so local clients keep reaching the program.
func ExampleListen() {
	a, b := pipe.New(pipe.Config{})
	var stacks []*polarnet.Stack
	for i, l := range []*pipe.Link{a, b} {
		addr := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)}), 24)
		st, err := polarnet.New(polarnet.Config{Link: l, Addrs: []netip.Prefix{addr}})
		if err != nil {
			log.Fatal(err)
		}
		defer st.Close()
		stacks = append(stacks, st)
	}
	client, server := stacks[0], stacks[1]
	polarnet.SetDefault(server)
	defer polarnet.SetDefault(nil)

	ln, err := listener.Listen("tcp", ":0") // was net.Listen
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	// One client on the client stack, one of Go's net on the loopback.
	dials := []func() (net.Conn, error){
		func() (net.Conn, error) { return (&dialer.Dialer{Stack: client}).Dial("tcp", "198.18.0.2:"+port) },
		func() (net.Conn, error) { return net.Dial("tcp", "127.0.0.1:"+port) },
	}
	for _, dial := range dials {
		c, err := dial()
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		defer s.Close()
		host, _, _ := net.SplitHostPort(s.RemoteAddr().String())
		fmt.Printf("accepted %s as %T\n", host, s)
	}
	// Output:
	// accepted 198.18.0.1 as *polarnet.TCPConn
	// accepted 127.0.0.1 as *net.TCPConn
}
