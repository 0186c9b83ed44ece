package dpdk_test

import (
	"context"
	"errors"
	"log"
	"net/http"
	"net/netip"

	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/dpdk"
	"github.com/polarnet/polarnet/listener"
	"github.com/polarnet/polarnet/polarnet"
)

// An HTTP server on a DPDK port: here a NIC bound to vfio-pci, with one
// queue pair per shard. README.md describes hugepages, drivers and virtual
// devices.
func ExampleNew() {
	l, err := dpdk.New(dpdk.Config{Device: "0000:01:00.0", Queues: 2})
	if errors.Is(err, link.ErrNotSupported) {
		log.Fatalf("build with -tags dpdk (cgo, DPDK 22.11): %v", err)
	}
	if err != nil {
		log.Fatal(err)
	}
	st, err := polarnet.New(polarnet.Config{Link: l, Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.0.2/24")}})
	if err != nil {
		log.Fatal(err) // New closed the link
	}
	defer st.Close()
	lc := listener.ListenConfig{Stack: st}
	ln, err := lc.Listen(context.Background(), "tcp", ":80")
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.Serve(ln, nil))
}
