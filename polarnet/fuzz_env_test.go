package polarnet_test

import (
	"strings"
	"testing"

	"github.com/polarnet/polarnet/polarnet"
)

// FuzzParseEnv feeds arbitrary values to every POLARNET_* variable: parsing
// must return a config or an error, never panic.
func FuzzParseEnv(f *testing.F) {
	f.Add("tap", "tap0", "2", "9000", "offloads=off", "198.18.0.2/24,fd00::2/64", "198.18.0.1", "198.18.0.53", "busy", "fail")
	f.Add("", "", "", "", "", "", "", "", "", "")
	f.Add("tap", "", "-1", "x", "k", "198.18.0.2", "nope", "[::1]:99999", "spin", "maybe")
	f.Fuzz(func(t *testing.T, link, dev, queues, mtu, opts, addr, gw, dns, poll, fallback string) {
		env := map[string]string{
			polarnet.EnvLink: link, polarnet.EnvDevice: dev, polarnet.EnvQueues: queues, polarnet.EnvMTU: mtu,
			polarnet.EnvLinkOptions: opts, polarnet.EnvAddr: addr, polarnet.EnvGateway: gw, polarnet.EnvDNS: dns,
			polarnet.EnvPoll: poll, polarnet.EnvFallback: fallback,
		}
		ec, err := polarnet.ParseEnv(func(k string) string { return env[k] })
		if err != nil {
			return
		}
		if ec.Kind != "" && len(ec.Config.Addrs) == 0 {
			t.Fatalf("a link without addresses was accepted: %+v", ec)
		}
		if strings.TrimSpace(link) == "" && ec.Kind != "" {
			t.Fatalf("kind %q from an empty POLARNET_LINK", ec.Kind)
		}
	})
}
