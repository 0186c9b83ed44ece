package blocked

import (
	"crypto/tls"
	"net"
)

func dialTLS() (*tls.Conn, error) {
	d := &net.Dialer{} // want `net.Dialer left as it is: the file passes one to tls.DialWithDialer`
	return tls.DialWithDialer(d, "tcp", "198.19.40.1:443", nil)
}
