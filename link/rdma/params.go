package rdma

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/polarnet/polarnet/link"
)

// configFromParams turns POLARNET_* settings into a Config: POLARNET_DEVICE
// is the network interface (Config.Netdev), POLARNET_QUEUES and
// POLARNET_MTU the fields of the same names, and POLARNET_LINK_OPTIONS
// takes rdma-device=mlx5_0, port=1, mac=02:..., addrs=198.18.0.2+fd00::2,
// rx-ring=512, tx-ring=512 and rss=off. Without addrs the link takes the
// stack's addresses from POLARNET_ADDR, read through getenv: its flow rules
// need them.
func configFromParams(p link.Params, getenv func(string) string) (Config, error) {
	cfg := Config{Netdev: p.Device, Queues: p.Queues, MTU: p.MTU}
	addrs := ""
	for k, v := range p.Options {
		var err error
		switch k {
		case "rdma-device":
			cfg.Device = v
		case "port":
			cfg.Port, err = strconv.Atoi(v)
		case "mac":
			cfg.MAC, err = net.ParseMAC(v)
		case "addrs":
			addrs = strings.ReplaceAll(v, "+", ",")
		case "rx-ring":
			cfg.RxRing, err = strconv.Atoi(v)
		case "tx-ring":
			cfg.TxRing, err = strconv.Atoi(v)
		case "rss":
			switch v {
			case "on", "true":
			case "off", "false":
				cfg.DisableRSS = true
			default:
				err = fmt.Errorf("want on or off")
			}
		default:
			return cfg, fmt.Errorf("rdma: unknown option %q (rdma-device, port, mac, addrs, rx-ring, tx-ring, rss)", k)
		}
		if err != nil {
			return cfg, fmt.Errorf("rdma: option %s=%q: %w", k, v, err)
		}
	}
	if addrs == "" && getenv != nil {
		addrs = getenv(link.EnvAddr)
	}
	for _, s := range strings.Split(addrs, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			pfx, perr := netip.ParsePrefix(s)
			if perr != nil {
				return cfg, fmt.Errorf("rdma: address %q: %w", s, err)
			}
			a = pfx.Addr()
		}
		cfg.Addrs = append(cfg.Addrs, a)
	}
	return cfg, nil
}
