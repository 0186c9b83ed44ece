package doctor

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/polarnet"
)

func TestEnvironment(t *testing.T) {
	vars := func(extra ...string) map[string]string {
		m := map[string]string{"POLARNET_LINK": "tap", "POLARNET_DEVICE": "pnt-doc", "POLARNET_ADDR": "198.19.40.2/24"}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	busy := func(getenv func(string) string) (*polarnet.Stack, error) {
		assert.Equal(t, "fail", getenv("POLARNET_FALLBACK"), "doctor wants the error, not the fallback")
		return nil, errors.New("tap: attaching to pnt-doc: another file descriptor holds its only queue")
	}
	starts := func(getenv func(string) string) (*polarnet.Stack, error) {
		la, _ := pipe.New(pipe.Config{})
		return polarnet.New(polarnet.Config{Link: la, Addrs: []netip.Prefix{netip.MustParsePrefix(getenv("POLARNET_ADDR"))}})
	}
	for _, tc := range []struct {
		name   string
		env    map[string]string
		start  func(func(string) string) (*polarnet.Stack, error)
		check  string
		status Status
		detail string
	}{
		{"nothing set", nil, nil, "variables", Info, "POLARNET_LINK is not set"},
		{"gateway off the link", vars("POLARNET_GATEWAY", "198.19.41.1"), busy, "variables", Fail, "gateway 198.19.41.1 is outside every prefix"},
		{"interop policy", vars("POLARNET_KERNEL_ROUTES", "10.0.0.0/8", "POLARNET_KERNEL_LISTEN", "all"), nil, "interop", Info, "loopback and [10.0.0.0/8] dial through the kernel; wildcard listens also accept on the kernel's all"},
		{"device held, fallback kernel", vars(), busy, "stack", Warn, `link tap on device "pnt-doc": tap: attaching to pnt-doc: another file descriptor holds its only queue`},
		{"device held, fallback fail", vars("POLARNET_FALLBACK", "fail"), busy, "stack", Fail, "another file descriptor holds its only queue"},
		{"starts", vars(), starts, "stack", OK, "starts: 1 shards, MTU 1500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := &Env{Getenv: func(k string) string { return tc.env[k] }, StartStack: tc.start}
			r := runOne(t, env, "env")
			c := find(t, r, tc.check)
			assert.Equal(t, tc.status, c.Status)
			require.Contains(t, c.Detail, tc.detail)
		})
	}
}
