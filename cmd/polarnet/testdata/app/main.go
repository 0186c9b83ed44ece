// Command app is a small net/http service written against Go's net alone.
// TestFixedProgramRunsOverTAP rewrites a copy with `polarnet fix`, changes
// nothing else, and runs it over polarnet.
//
// GET / answers with the address the request came in on; GET /?dial=ADDR
// dials ADDR, sends "ping\n" and answers with the line it reads back and
// the conn's two ends.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"
)

func main() {
	addr := flag.String("listen", ":8080", "address to serve on")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(handle),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			c.(*net.TCPConn).SetKeepAlivePeriod(30 * time.Second)
			return ctx
		},
	}
	log.Fatal(srv.Serve(ln))
}

func handle(w http.ResponseWriter, r *http.Request) {
	to := r.URL.Query().Get("dial")
	if to == "" {
		fmt.Fprintf(w, "served on %v\n", r.Context().Value(http.LocalAddrContextKey))
		return
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.DialContext(r.Context(), "tcp", to)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := "", error(nil)
	if _, err = fmt.Fprintln(c, "ping"); err == nil {
		line, err = bufio.NewReader(c).ReadString('\n')
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	fmt.Fprintf(w, "%s from %v via %v\n", strings.TrimSpace(line), c.RemoteAddr(), c.LocalAddr())
}
