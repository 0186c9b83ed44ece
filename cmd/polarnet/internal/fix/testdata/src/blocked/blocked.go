package blocked

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
)

func dialTLS() (*tls.Conn, error) {
	d := &net.Dialer{} // want `net.Dialer left as it is: the file`
	return tls.DialWithDialer(d, "tcp", "198.19.40.1:443", nil)
}

func typed(ctx context.Context, raddr netip.AddrPort) (*net.TCPConn, error) {
	var d net.Dialer                                      // want `net.Dialer left as it is: the file calls its DialTCP at .*blocked.go:17:11, which dialer.Dialer lacks`
	return d.DialTCP(ctx, "tcp", netip.AddrPort{}, raddr) // want `DialTCP on net.Dialer cannot be rewritten: it returns net's concrete type`
}
