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
	url := flag.String("get", "", "fetch this URL and print the body")
	flag.Parse()
	log.SetFlags(0)
	switch {
	case *listen != "":
		log.Fatal(serve(*listen))
	case *url != "":
		if err := get(*url, os.Stdout, os.Stderr); err != nil {
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
	log.Printf("http: serving on %v (%T)", ln.Addr(), ln)
	return http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s, you asked for %s\n", r.RemoteAddr, r.URL.Path)
	}))
}

// get prints the response's status to status and its body to body.
func get(url string, body, status io.Writer) error {
	var d dialer.Dialer
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 30 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	fmt.Fprintln(status, resp.Status)
	_, err = io.Copy(body, resp.Body)
	return err
}
