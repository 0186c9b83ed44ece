package client

import (
	"context"
	"net"
	"net/http"
	"time"
)

var dial = net.Dial // want `net.Dial → dialer.Dial`

func get(ctx context.Context) (net.Conn, error) {
	d := &net.Dialer{Timeout: time.Second, KeepAlive: -1} // want `net.Dialer → dialer.Dialer`
	return d.DialContext(ctx, "tcp", "localhost:6379")
}

func clients() []*http.Client {
	return []*http.Client{
		{Transport: &http.Transport{ // want `http.Transport without a dial function`
			MaxIdleConns: 10,
		}},
		{Transport: &http.Transport{
			DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext, // want `net.Dialer → dialer.Dialer`
		}},
	}
}

func timeout() {
	c, err := net.DialTimeout("tcp", "198.19.40.1:80", time.Second) // want `net.DialTimeout → dialer.DialTimeout`
	if err == nil {
		c.Close()
	}
}

func cloned() *http.Transport {
	return http.DefaultTransport.(*http.Transport).Clone() // want `http.DefaultTransport \(and what clones it\) dials with Go's net`
}
