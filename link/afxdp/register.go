package afxdp

import (
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/polarnet/polarnet/link"
)

// The AF_XDP link is selectable with POLARNET_LINK=afxdp. POLARNET_DEVICE
// names the interface, POLARNET_QUEUES and POLARNET_MTU are Config.Queues
// and Config.MTU, and POLARNET_LINK_OPTIONS takes the Config fields
// filter=stack|tcp|all, mode=auto|native|generic, zerocopy=auto|off|require,
// frame=BYTES, ring=N, frames=N and offloads=on|off (off: DisableOffloads).
//
// The XDP program needs the stack's addresses, which link.Params does not
// carry: the option addrs=A/N;B/N gives them, and without it the link takes
// POLARNET_ADDR from the process's environment.
func init() { link.Register("afxdp", openFromParams) }

func openFromParams(p link.Params) (link.Link, error) {
	cfg, err := configFromParams(p, os.Getenv)
	if err != nil {
		return nil, err
	}
	return New(cfg)
}

func configFromParams(p link.Params, getenv func(string) string) (Config, error) {
	cfg := Config{Interface: p.Device, Queues: p.Queues, MTU: p.MTU}
	addrs, haveAddrs := p.Options["addrs"]
	if !haveAddrs {
		addrs = strings.ReplaceAll(getenv(link.EnvAddr), ",", ";")
	}
	for _, s := range strings.Split(addrs, ";") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			return cfg, fmt.Errorf("afxdp: option addrs: %w", err)
		}
		cfg.Addresses = append(cfg.Addresses, pfx)
	}
	for k, v := range p.Options {
		var err error
		switch k {
		case "addrs":
		case "filter":
			cfg.Filter, err = pick(k, v, map[string]Filter{"stack": FilterStack, "tcp": FilterTCP, "all": FilterAll})
		case "mode":
			cfg.Mode, err = pick(k, v, map[string]Mode{"auto": ModeAuto, "native": ModeNative, "generic": ModeGeneric})
		case "zerocopy":
			cfg.ZeroCopy, err = pick(k, v, map[string]ZeroCopy{"auto": ZeroCopyAuto, "off": ZeroCopyOff, "require": ZeroCopyRequire})
		case "offloads":
			var on bool
			on, err = pick(k, v, map[string]bool{"on": true, "off": false})
			cfg.DisableOffloads = !on
		case "frame", "ring", "frames":
			var n int
			if n, err = strconv.Atoi(v); err != nil || n <= 0 {
				err = fmt.Errorf("afxdp: option %s=%q: want a positive integer", k, v)
			}
			switch k {
			case "frame":
				cfg.FrameSize = n
			case "ring":
				cfg.RingSize = n
			default:
				cfg.Frames = n
			}
		default:
			err = fmt.Errorf("afxdp: unknown option %q (addrs, filter, mode, zerocopy, frame, ring, frames, offloads)", k)
		}
		if err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// pick looks up the option value v among choices.
func pick[T any](k, v string, choices map[string]T) (T, error) {
	if c, ok := choices[v]; ok {
		return c, nil
	}
	names := slices.Sorted(maps.Keys(choices))
	var zero T
	return zero, fmt.Errorf("afxdp: option %s=%q: want one of %s", k, v, strings.Join(names, ", "))
}
