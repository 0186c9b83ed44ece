package shadow

import "net"

func serve() {
	var listener net.Listener
	listener, _ = net.Listen("tcp", ":0") // want `net.Listen → listener.Listen`
	listener.Close()
}
