// Quickstart shows polarnet as a drop-in for net: a net/http server and an
// http.Client, unchanged, each on its own userspace stack.
//
//	go run ./examples/quickstart        two stacks over an in-memory link, no root
//	go run ./examples/quickstart -tap   as root: a TAP device and a kernel peer in
//	                                    a network namespace, both directions
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/polarnet/polarnet/dialer"
	"github.com/polarnet/polarnet/link/linktest"
	"github.com/polarnet/polarnet/listener"
	"github.com/polarnet/polarnet/polarnet"
)

func main() {
	useTAP := flag.Bool("tap", false, "run against the kernel over a TAP device in a network namespace (root)")
	flag.Parse()
	log.SetFlags(0)
	var err error
	if *useTAP {
		err = runTAP()
	} else {
		err = runPipe()
	}
	if err != nil {
		log.Fatalf("quickstart: %v", err)
	}
}

// runPipe joins two stacks with an in-memory link and serves HTTP from one
// to the other.
func runPipe() error {
	la, lb := linktest.Pipe(linktest.PipeConfig{})
	client, err := polarnet.New(polarnet.Config{Link: la, Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.0.1/24")}})
	if err != nil {
		return err
	}
	defer client.Close()
	server, err := polarnet.New(polarnet.Config{Link: lb, Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.0.2/24")}})
	if err != nil {
		return err
	}
	defer server.Close()
	fmt.Println("two polarnet stacks joined by an in-memory link:")
	fmt.Println("  client stack 198.18.0.1, server stack 198.18.0.2")
	if err := serveAndGet(&listener.ListenConfig{Stack: server}, "198.18.0.2:8080", &dialer.Dialer{Stack: client}, "polarnet client", "polarnet server"); err != nil {
		return err
	}
	st := client.Stats().Total
	fmt.Printf("client stack link counters: %d frames in, %d frames out\n", st.RxFrames, st.TxFrames)
	return nil
}

// serveAndGet starts a net/http server on a listener from lc, fetches a page
// through d, and prints the exchange.
func serveAndGet(lc *listener.ListenConfig, addr string, d *dialer.Dialer, clientName, serverName string) error {
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s from %s (%s via %T)\n", r.RemoteAddr, serverName, r.URL.Path, ln)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	hc := &http.Client{
		Transport: &http.Transport{DialContext: d.DialContext},
		Timeout:   10 * time.Second,
	}
	url := "http://" + ln.Addr().String() + "/quickstart"
	if host, port, _ := net.SplitHostPort(addr); host != "" {
		url = "http://" + net.JoinHostPort(host, port) + "/quickstart"
	}
	start := time.Now()
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Printf("  %s GET %s -> %s in %v\n  body: %s", clientName, url, resp.Status, time.Since(start).Round(time.Microsecond), body)
	return nil
}

func init() {
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: quickstart [-tap]\n")
		flag.PrintDefaults()
	}
}

func runTAP() error { return fmt.Errorf("-tap: not built yet") }
