package server

import (
	"net"
	"net/http"
	"time"
)

func serve() error {
	ln, err := net.Listen("tcp", ":8080") // want `net.Listen → listener.Listen`
	if err != nil {
		return err
	}
	go http.Serve(ln, nil)
	lc := net.ListenConfig{KeepAlive: time.Minute} // want `net.ListenConfig → listener.ListenConfig`
	pc, err := lc.ListenPacket(nil, "udp", ":8125")
	if err != nil {
		return err
	}
	defer pc.Close()
	if u, ok := pc.(*net.UDPConn); ok { // want `\*net.UDPConn assertion → polarnet.AnyUDPConn`
		u.SetReadBuffer(1 << 20)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		c.(*net.TCPConn).SetLinger(0) // want `\*net.TCPConn assertion → polarnet.AnyTCPConn`
		switch tc := c.(type) {
		case *net.TCPConn: // want `\*net.TCPConn assertion → polarnet.AnyTCPConn`
			tc.CloseWrite()
		}
	}
}

func fd(c net.Conn) {
	tc := c.(*net.TCPConn) // want `\*net.TCPConn assertion left as it is \(tc.File at line 39\)`
	f, _ := tc.File()      // want `File on net.TCPConn cannot be rewritten`
	f.Close()
}

func kernelOnly() {
	net.ListenTCP("tcp", &net.TCPAddr{Port: 1}) // want `net.ListenTCP cannot be rewritten: use listener.Listen`
	ln, _ := net.Listen("tcp", ":0")            // want `net.Listen → listener.Listen`
	ln.(*net.TCPListener).AcceptTCP()           // want `\*net.TCPListener assertion left as it is \(calls AcceptTCP\)` `AcceptTCP on net.TCPListener cannot be rewritten`
}

func listenAndServe(srv *http.Server) {
	http.ListenAndServe(":8081", nil) // want `http's ListenAndServe listens with Go's net`
	srv.ListenAndServeTLS("c", "k")   // want `http's ListenAndServeTLS listens with Go's net`
}
