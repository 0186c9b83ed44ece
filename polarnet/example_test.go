package polarnet_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"

	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

// Two stacks in one process, joined by the in-memory pipe link: one listens,
// the other dials, and a message crosses both.
func ExampleNew() {
	a, b := pipe.New(pipe.Config{})
	client, err := polarnet.New(polarnet.Config{Link: a, Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.0.1/24")}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	server, err := polarnet.New(polarnet.Config{Link: b, Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.0.2/24")}})
	if err != nil {
		log.Fatal(err)
	}
	defer server.Close()

	addr := netip.MustParseAddrPort("198.18.0.2:7")
	ln, err := server.ListenTCP("tcp", addr, 0, net.KeepAliveConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c) // echo
	}()

	c, err := client.DialTCP(context.Background(), "tcp", netip.AddrPort{}, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "hello")
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s from %v\n", buf, c.RemoteAddr())
	// Output: hello from 198.18.0.2:7
}
