// HTTP serves and fetches pages with net/http, unchanged, over polarnet's
// drop-in listener and dialer: the kernel by default, a polarnet stack when
// POLARNET_LINK and POLARNET_ADDR are set.
//
//	go run ./examples/http -listen :8080
//	go run ./examples/http -get http://127.0.0.1:8080/hello
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/polarnet/polarnet/dialer"
	"github.com/polarnet/polarnet/listener"
)

func main() {
	listen := flag.String("listen", "", "serve on this address")
	get := flag.String("get", "", "fetch this URL and print the body")
	flag.Parse()
	log.SetFlags(0)
	switch {
	case *listen != "":
		ln, err := listener.Listen("tcp", *listen)
		if err != nil {
			log.Fatal(err)
		}
		log.Printf("http: serving on %v (%T)", ln.Addr(), ln)
		log.Fatal(http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello %s, you asked for %s\n", r.RemoteAddr, r.URL.Path)
		})))
	case *get != "":
		var d dialer.Dialer
		hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 30 * time.Second}
		resp, err := hc.Get(*get)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		fmt.Fprintln(os.Stderr, resp.Status)
		io.Copy(os.Stdout, resp.Body)
	default:
		flag.Usage()
		os.Exit(2)
	}
}
