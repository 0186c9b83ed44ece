package doctor

import (
	"fmt"
	"net/netip"

	"github.com/polarnet/polarnet/polarnet"
)

// checkEnvironment reads the POLARNET_* variables as a program would: it
// reports what does not parse or cannot work, the interop policy, and
// whether a stack starts on the link they name (a device another process
// holds fails here, where a program under POLARNET_FALLBACK=kernel would
// log it and run on the kernel).
func checkEnvironment(e *Env, r *Report) {
	getenv := e.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	ec, err := polarnet.ParseEnv(getenv)
	if err != nil {
		r.add("variables", Fail, err.Error(), "correct the variable the error names")
		return
	}
	if ec.Kind == "" {
		r.add("variables", Info, polarnet.EnvLink+" is not set: programs use Go's net", "")
		return
	}
	c := &ec.Config
	var gateways []netip.Addr
	for _, gw := range []netip.Addr{c.Gateway4, c.Gateway6} {
		if gw.IsValid() {
			gateways = append(gateways, gw)
		}
	}
	r.add("variables", OK, fmt.Sprintf("link %s, device %q, addresses %v, gateways %v", ec.Kind, ec.Params.Device, c.Addrs, gateways), "")
	routes := "what the stack cannot route"
	if len(c.KernelRoutes) > 0 {
		routes = fmt.Sprint(c.KernelRoutes)
	}
	r.add("interop", Info, fmt.Sprintf("loopback and %s dial through the kernel; wildcard listens also accept on the kernel's %s", routes, c.KernelListen), "")
	if e.StartStack == nil {
		r.add("stack", Info, "not started (-probe=false)", "")
		return
	}
	st, err := e.StartStack(func(k string) string {
		if k == polarnet.EnvFallback {
			return "fail"
		}
		return getenv(k)
	})
	if err != nil {
		status, fix := Fail, "fix the link, or set "+polarnet.EnvFallback+"=kernel to run on the kernel's TCP/IP"
		if ec.Fallback == polarnet.FallbackKernel {
			status, fix = Warn, "programs run on the kernel's TCP/IP (POLARNET_FALLBACK=kernel) until the link opens"
		}
		r.add("stack", status, fmt.Sprintf("link %s on device %q: %v", ec.Kind, ec.Params.Device, err), fix)
		return
	}
	defer st.Close()
	r.add("stack", OK, fmt.Sprintf("starts: %d shards, MTU %d", len(st.Stats().Shards), st.MTU()), "")
}
