package polarnet

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
)

// Resolver returns the resolver for names dialed through the stack: one that
// queries Config.DNS through the stack itself, or net.DefaultResolver when no
// DNS server is configured.
func (s *Stack) Resolver() *net.Resolver {
	if len(s.cfg.DNS) == 0 {
		return net.DefaultResolver
	}
	var next atomic.Uint32
	return &net.Resolver{
		PreferGo: true,
		// Go's resolver asks for the servers in resolv.conf; the stack's own
		// servers replace them, taken in turn so a dead one is retried past.
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			server := s.cfg.DNS[int(next.Add(1)-1)%len(s.cfg.DNS)]
			if strings.HasPrefix(network, "tcp") {
				return s.DialTCP(ctx, network, netipZero, server)
			}
			return s.DialUDP(network, netipZero, server)
		},
	}
}
