// Echo is a TCP echo server and client written against polarnet's drop-in
// dialer and listener. Without configuration it runs on the kernel, like a
// program using net; with POLARNET_LINK and POLARNET_ADDR set it runs on a
// polarnet stack, unchanged.
//
//	go run ./examples/echo -listen :7777
//	echo hello | go run ./examples/echo -connect 127.0.0.1:7777
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"

	"github.com/polarnet/polarnet/dialer"
	"github.com/polarnet/polarnet/listener"
)

func main() {
	listen := flag.String("listen", "", "serve on this address")
	connect := flag.String("connect", "", "send stdin line by line to this address and print the echoes")
	flag.Parse()
	log.SetFlags(0)
	switch {
	case *listen != "":
		log.Fatal(serve(*listen))
	case *connect != "":
		if err := client(*connect, os.Stdin, os.Stdout); err != nil {
			log.Fatal(err)
		}
	default:
		flag.Usage()
		os.Exit(2)
	}
}

func serve(addr string) error {
	ln, err := listener.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Printf("echo: listening on %v (%T)", ln.Addr(), ln)
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func(c net.Conn) {
			defer c.Close()
			n, _ := io.Copy(c, c)
			log.Printf("echo: %v: %d bytes", c.RemoteAddr(), n)
		}(c)
	}
}

func client(addr string, in io.Reader, out io.Writer) error {
	c, err := dialer.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	replies := bufio.NewReader(c)
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		if _, err := fmt.Fprintln(c, lines.Text()); err != nil {
			return err
		}
		reply, err := replies.ReadString('\n')
		if err != nil {
			return err
		}
		fmt.Fprint(out, reply)
	}
	return lines.Err()
}
