package client

import "net/http"

// A file that imports net/http but not net still dials with Go's net.
func roundTrip(req *http.Request) (*http.Response, error) {
	t := http.Transport{ // want `http.Transport without a dial function`
		Proxy: http.ProxyFromEnvironment,
	}
	return t.RoundTrip(req)
}

func defaultTransport() http.RoundTripper {
	return http.DefaultTransport // want `http.DefaultTransport \(and what clones it\) dials with Go's net`
}
