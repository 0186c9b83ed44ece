package prom_test

import (
	"bufio"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"

	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/metrics/prom"
	"github.com/polarnet/polarnet/polarnet"
)

// Serve a stack's metrics for Prometheus to scrape. A program would
// register the handler on its own mux, at /metrics.
func ExampleHandler() {
	l, _ := pipe.New(pipe.Config{Queues: 2})
	st, err := polarnet.New(polarnet.Config{Link: l, Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.0.1/24")}})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	srv := httptest.NewServer(prom.Handler(st))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "# TYPE polarnet_link_info") || strings.HasPrefix(line, "polarnet_tcpip_tcp_current_established") {
			fmt.Println(line)
		}
	}
	// Output:
	// # TYPE polarnet_link_info gauge
	// polarnet_tcpip_tcp_current_established 0
}
