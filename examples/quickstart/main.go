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
	"time"

	"github.com/polarnet/polarnet/dialer"
	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/link/tap"
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
	la, lb := pipe.New(pipe.Config{})
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

// lister opens a listener: a polarnet ListenConfig, or one in a namespace.
type lister interface {
	Listen(ctx context.Context, network, addr string) (net.Listener, error)
}

// serveAndGet starts a net/http server on a listener from lc, fetches a page
// through d, and prints the exchange.
func serveAndGet(lc lister, addr string, d *dialer.Dialer, clientName, serverName string) error {
	return serveAndGetWith(lc, addr, d.DialContext, clientName, serverName)
}

func serveAndGetWith(lc lister, addr string, dial func(ctx context.Context, network, addr string) (net.Conn, error), clientName, serverName string) error {
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s from the %s (%T)\n", r.RemoteAddr, serverName, ln)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{DialContext: dial}, Timeout: 10 * time.Second}
	url := "http://" + addr + "/quickstart"
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
	fmt.Printf("  %s GET %s -> %s in %v\n    %s", clientName, url, resp.Status, time.Since(start).Round(time.Microsecond), body)
	return nil
}

// runTAP puts the kernel side of a TAP device in a fresh network namespace
// and serves HTTP both ways between the kernel there and a polarnet stack.
func runTAP() error {
	ns, err := netns.Create()
	if err != nil {
		return fmt.Errorf("creating a network namespace (root needed): %w", err)
	}
	defer ns.Delete()
	link, err := tap.New(tap.Config{Name: netns.UniqueName("pnq")})
	if err != nil {
		return err
	}
	dev := link.Info().Name
	kernelAddr, stackAddr := netip.MustParsePrefix("198.18.0.1/24"), netip.MustParsePrefix("198.18.0.2/24")
	if err := ns.MoveLink(dev); err != nil {
		link.Close()
		return err
	}
	if err := ns.Configure(dev, link.Info().MTU, kernelAddr); err != nil {
		link.Close()
		return err
	}
	st, err := polarnet.New(polarnet.Config{Link: link, Addrs: []netip.Prefix{stackAddr}})
	if err != nil {
		return err
	}
	defer st.Close()
	fmt.Printf("TAP device %s: kernel side %v in namespace %s, polarnet stack %v\n", dev, kernelAddr, ns.Name, stackAddr)

	// The kernel's sockets are opened inside the namespace; they stay there.
	inNS := &listener.ListenConfig{}
	kernelLC := &nsListenConfig{ns: ns, lc: inNS}
	if err := serveAndGet(kernelLC, "198.18.0.1:8080", &dialer.Dialer{Stack: st}, "polarnet client", "kernel server"); err != nil {
		return err
	}
	kernelDialer := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := ns.Do(func() (err error) {
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	if err := serveAndGetWith(&listener.ListenConfig{Stack: st}, "198.18.0.2:8080", kernelDialer, "kernel client", "polarnet server"); err != nil {
		return err
	}
	s := st.Stats().Total
	fmt.Printf("polarnet stack link counters: %d frames in, %d frames out\n", s.RxFrames, s.TxFrames)
	return nil
}

// nsListenConfig listens inside a network namespace.
type nsListenConfig struct {
	ns *netns.NS
	lc *listener.ListenConfig
}

func (n *nsListenConfig) Listen(ctx context.Context, network, addr string) (ln net.Listener, err error) {
	err = n.ns.Do(func() (err error) {
		ln, err = n.lc.Listen(ctx, network, addr)
		return err
	})
	return ln, err
}
