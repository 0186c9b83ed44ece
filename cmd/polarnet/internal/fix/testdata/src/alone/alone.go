package alone

import "net"

func dial() { net.Dial("tcp", "198.19.40.1:80") } // want `net.Dial → dialer.Dial`
