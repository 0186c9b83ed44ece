package dpdk

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/polarnet/polarnet/link"
)

// configFromParams builds a Config from the POLARNET_* environment
// (link.Params). POLARNET_LINK_OPTIONS keys, comma-separated k=v;
// lists inside a value are separated by ';':
//
//	rxd, txd, pool, dataroom  RxDescriptors, TxDescriptors, PoolSize, MbufDataRoom
//	mac                       MAC
//	offloads=off              DisableOffloads
//	skipcsum=on               SkipChecksums
//	promisc=on                Promiscuous
//	isolate=198.18.0.2;fd00:198:18::2   Isolate with IsolateAddrs
//	wait                      auto, interrupt or sleep
//	poll, pollmax             PollInterval, PollIntervalMax (Go durations)
//	waitup                    WaitUp (a Go duration): wait for the link to be up
//	lcores, mem, prefix, hugedir, loglevel   EALConfig fields
//	nohuge=on                 EALConfig.NoHuge
//	allow=0000:03:00.0;0000:03:00.1        EALConfig.Allow
func configFromParams(p link.Params) (Config, error) {
	cfg := Config{Device: p.Device, Queues: p.Queues, MTU: p.MTU}
	for k, v := range p.Options {
		if err := setOption(&cfg, k, v); err != nil {
			return cfg, fmt.Errorf("dpdk: option %s=%q: %w", k, v, err)
		}
	}
	return cfg, nil
}

func setOption(cfg *Config, k, v string) error {
	list := func() []string {
		var out []string
		for _, s := range strings.Split(v, ";") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	var err error
	switch k {
	case "rxd":
		cfg.RxDescriptors, err = strconv.Atoi(v)
	case "txd":
		cfg.TxDescriptors, err = strconv.Atoi(v)
	case "pool":
		cfg.PoolSize, err = strconv.Atoi(v)
	case "dataroom":
		cfg.MbufDataRoom, err = strconv.Atoi(v)
	case "mac":
		cfg.MAC, err = net.ParseMAC(v)
	case "offloads":
		var on bool
		on, err = parseOnOff(v)
		cfg.DisableOffloads = !on
	case "skipcsum":
		cfg.SkipChecksums, err = parseOnOff(v)
	case "promisc":
		cfg.Promiscuous, err = parseOnOff(v)
	case "isolate":
		cfg.Isolate = true
		for _, s := range list() {
			a, perr := netip.ParseAddr(s)
			if perr != nil {
				return perr
			}
			cfg.IsolateAddrs = append(cfg.IsolateAddrs, a)
		}
	case "wait":
		switch v {
		case "auto":
			cfg.Wait = WaitAuto
		case "interrupt":
			cfg.Wait = WaitInterrupt
		case "sleep":
			cfg.Wait = WaitSleep
		default:
			return fmt.Errorf("want auto, interrupt or sleep")
		}
	case "poll":
		cfg.PollInterval, err = time.ParseDuration(v)
	case "pollmax":
		cfg.PollIntervalMax, err = time.ParseDuration(v)
	case "waitup":
		cfg.WaitUp, err = time.ParseDuration(v)
	case "lcores":
		cfg.EAL.Lcores = v
	case "mem":
		cfg.EAL.MemoryMB, err = strconv.Atoi(v)
	case "prefix":
		cfg.EAL.FilePrefix = v
	case "hugedir":
		cfg.EAL.HugeDir = v
	case "loglevel":
		cfg.EAL.LogLevel = v
	case "nohuge":
		cfg.EAL.NoHuge, err = parseOnOff(v)
	case "allow":
		cfg.EAL.Allow = list()
	default:
		return fmt.Errorf("unknown option (rxd, txd, pool, dataroom, mac, offloads, skipcsum, promisc, isolate, wait, poll, pollmax, waitup, lcores, mem, prefix, hugedir, loglevel, nohuge, allow)")
	}
	return err
}

// parseOnOff takes on/off as well as the forms of strconv.ParseBool.
func parseOnOff(v string) (bool, error) {
	switch v {
	case "on":
		return true, nil
	case "off":
		return false, nil
	}
	return strconv.ParseBool(v)
}
