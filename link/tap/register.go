package tap

import (
	"fmt"
	"net"
	"strconv"

	"github.com/polarnet/polarnet/link"
)

// The TAP link is selectable with POLARNET_LINK=tap. POLARNET_DEVICE names
// the device; POLARNET_LINK_OPTIONS takes offloads=off, persist=true and
// mac=02:..., the Config fields of the same meaning.
func init() { link.Register("tap", openFromParams) }

func openFromParams(p link.Params) (link.Link, error) {
	cfg, err := configFromParams(p)
	if err != nil {
		return nil, err
	}
	return New(cfg)
}

func configFromParams(p link.Params) (Config, error) {
	cfg := Config{Name: p.Device, Queues: p.Queues, MTU: p.MTU}
	for k, v := range p.Options {
		switch k {
		case "offloads":
			on, err := strconv.ParseBool(onOff(v))
			if err != nil {
				return cfg, fmt.Errorf("tap: option offloads=%q: want on or off", v)
			}
			cfg.DisableOffloads = !on
		case "persist":
			persist, err := strconv.ParseBool(onOff(v))
			if err != nil {
				return cfg, fmt.Errorf("tap: option persist=%q: want true or false", v)
			}
			cfg.Persist = persist
		case "mac":
			mac, err := net.ParseMAC(v)
			if err != nil {
				return cfg, fmt.Errorf("tap: option mac: %w", err)
			}
			cfg.MAC = mac
		default:
			return cfg, fmt.Errorf("tap: unknown option %q (offloads, persist, mac)", k)
		}
	}
	return cfg, nil
}

// onOff lets options say on/off as well as true/false.
func onOff(v string) string {
	switch v {
	case "on":
		return "true"
	case "off":
		return "false"
	}
	return v
}
