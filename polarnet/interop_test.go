package polarnet_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

func TestViaKernel(t *testing.T) {
	stackAddrs := func(c *polarnet.Config) {
		c.Addrs = []netip.Prefix{netip.MustParsePrefix("198.19.40.2/24"), netip.MustParsePrefix("fd00:198:19:40::2/64")}
	}
	for _, tc := range []struct {
		name   string
		tweak  func(*polarnet.Config)
		kernel []string
		stack  []string
	}{
		{
			name:   "default: what the stack cannot route",
			kernel: []string{"127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1", "10.1.2.3", "2001:db8::1"},
			stack:  []string{"198.19.40.1", "198.19.40.2", "fd00:198:19:40::1", "0.0.0.0", "::"},
		},
		{
			name:   "gateway: only loopback",
			tweak:  func(c *polarnet.Config) { c.Gateway4 = netip.MustParseAddr("198.19.40.1") },
			kernel: []string{"127.0.0.1", "::1", "2001:db8::1"},
			stack:  []string{"198.19.40.1", "10.1.2.3", "8.8.8.8"},
		},
		{
			name: "kernel routes carve out of the gateway, longest prefix wins",
			tweak: func(c *polarnet.Config) {
				c.Gateway4 = netip.MustParseAddr("198.19.40.1")
				c.KernelRoutes = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("198.19.0.0/16"), netip.MustParsePrefix("198.19.40.128/25")}
			},
			kernel: []string{"10.1.2.3", "198.19.41.1", "198.19.40.200", "127.0.0.1"},
			stack:  []string{"8.8.8.8", "198.19.40.1", "198.19.40.127"},
		},
		{
			name:   "kernel routes replace the default",
			tweak:  func(c *polarnet.Config) { c.KernelRoutes = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} },
			kernel: []string{"127.0.0.1", "::1"},
			stack:  []string{"10.1.2.3", "2001:db8::1", "198.19.40.1"},
		},
		{
			name:   "a kernel route as long as the stack's prefix wins",
			tweak:  func(c *polarnet.Config) { c.KernelRoutes = []netip.Prefix{netip.MustParsePrefix("198.19.40.0/24")} },
			kernel: []string{"198.19.40.1"},
			stack:  []string{"fd00:198:19:40::1", "10.1.2.3"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			la, _ := pipe.New(pipe.Config{})
			st := newStack(t, la, addrA, addrA6, stackAddrs, func(c *polarnet.Config) {
				if tc.tweak != nil {
					tc.tweak(c)
				}
			})
			for _, a := range tc.kernel {
				assert.True(t, st.ViaKernel(netip.MustParseAddr(a)), "%s should go to the kernel", a)
			}
			for _, a := range tc.stack {
				assert.False(t, st.ViaKernel(netip.MustParseAddr(a)), "%s should stay on the stack", a)
			}
		})
	}
}
