package dialer_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"

	"github.com/polarnet/polarnet/dialer"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/listener"
	"github.com/polarnet/polarnet/polarnet"
)

// runStack runs a stack on l at prefix's address.
func runStack(l link.Link, prefix string) *polarnet.Stack {
	st, err := polarnet.New(polarnet.Config{Link: l, Addrs: []netip.Prefix{netip.MustParsePrefix(prefix)}})
	if err != nil {
		log.Fatal(err)
	}
	return st
}

// A listener and a dialer on two stacks joined by the in-memory pipe link.
// Without Stack they would use the default stack (POLARNET_* variables,
// polarnet.SetDefault) or Go's net; either way the code is net's.
func ExampleDialer() {
	a, b := pipe.New(pipe.Config{})
	client, server := runStack(a, "198.18.0.1/24"), runStack(b, "198.18.0.2/24")
	defer client.Close()
	defer server.Close()

	lc := listener.ListenConfig{Stack: server}
	ln, err := lc.Listen(context.Background(), "tcp", "198.18.0.2:8080")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			fmt.Fprintf(c, "hello, %s", host)
			c.Close()
		}
	}()

	d := dialer.Dialer{Stack: client}
	c, err := d.Dial("tcp", "198.18.0.2:8080")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	msg, err := io.ReadAll(c)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(msg))
	// Output: hello, 198.18.0.1
}
