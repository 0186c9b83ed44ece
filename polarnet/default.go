package polarnet

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/polarnet/polarnet/link"
)

// FallbackPolicy says what happens when the configured link cannot open.
type FallbackPolicy uint8

const (
	// FallbackKernel logs the error once and uses Go's net. The default:
	// the same binary keeps working on hosts without the fast link.
	FallbackKernel FallbackPolicy = iota
	// FallbackFail makes every dial and listen return the error.
	FallbackFail
)

// EnvConfig is what the environment asks for.
type EnvConfig struct {
	// Kind is the link kind; empty means no stack (the kernel).
	Kind     string
	Params   link.Params
	Config   Config
	Fallback FallbackPolicy
}

// The environment variables an existing binary is switched with.
const (
	EnvLink        = "POLARNET_LINK"         // link kind: "tap", ...; empty or "kernel": Go's net
	EnvDevice      = "POLARNET_DEVICE"       // interface name, e.g. "tap0"
	EnvQueues      = "POLARNET_QUEUES"       // queue pairs
	EnvMTU         = "POLARNET_MTU"          // MTU
	EnvLinkOptions = "POLARNET_LINK_OPTIONS" // link-specific "k=v,k=v"
	EnvAddr        = link.EnvAddr            // addresses with prefix, comma-separated
	EnvGateway     = "POLARNET_GATEWAY"      // default gateways, comma-separated
	EnvDNS         = "POLARNET_DNS"          // DNS servers (addr or addr:port), comma-separated
	EnvPoll        = "POLARNET_POLL"         // adaptive, busy or blocking
	EnvFallback    = "POLARNET_FALLBACK"     // kernel (default) or fail
	// EnvKernelRoutes lists prefixes dialed through the kernel,
	// comma-separated (Config.KernelRoutes).
	EnvKernelRoutes = "POLARNET_KERNEL_ROUTES"
	// EnvKernelListen is loopback (default), all or none (Config.KernelListen).
	EnvKernelListen = "POLARNET_KERNEL_LISTEN"
)

// ParseEnv reads the POLARNET_* variables through getenv (os.Getenv when nil).
func ParseEnv(getenv func(string) string) (EnvConfig, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var ec EnvConfig
	switch v := strings.TrimSpace(getenv(EnvFallback)); v {
	case "", "kernel":
	case "fail":
		ec.Fallback = FallbackFail
	default:
		return ec, fmt.Errorf("polarnet: %s=%q: want kernel or fail", EnvFallback, v)
	}
	ec.Kind = strings.TrimSpace(getenv(EnvLink))
	if ec.Kind == "" || ec.Kind == "kernel" {
		ec.Kind = ""
		return ec, nil
	}
	p := &ec.Params
	p.Device = strings.TrimSpace(getenv(EnvDevice))
	var err error
	if p.Queues, err = envInt(getenv, EnvQueues); err != nil {
		return ec, err
	}
	if p.MTU, err = envInt(getenv, EnvMTU); err != nil {
		return ec, err
	}
	if p.Options, err = parseOptions(getenv(EnvLinkOptions)); err != nil {
		return ec, err
	}
	cfg := &ec.Config
	if cfg.Addrs, err = envPrefixes(getenv, EnvAddr); err != nil {
		return ec, err
	}
	if len(cfg.Addrs) == 0 {
		return ec, fmt.Errorf("polarnet: %s=%s needs %s (e.g. 198.18.0.2/24)", EnvLink, ec.Kind, EnvAddr)
	}
	for _, s := range splitList(getenv(EnvGateway)) {
		gw, err := netip.ParseAddr(s)
		if err != nil {
			return ec, fmt.Errorf("polarnet: %s: %w", EnvGateway, err)
		}
		if gw.Is4() {
			cfg.Gateway4 = gw
		} else {
			cfg.Gateway6 = gw
		}
	}
	for _, s := range splitList(getenv(EnvDNS)) {
		ap, err := parseDNSServer(s)
		if err != nil {
			return ec, fmt.Errorf("polarnet: %s: %w", EnvDNS, err)
		}
		cfg.DNS = append(cfg.DNS, ap)
	}
	if cfg.KernelRoutes, err = envPrefixes(getenv, EnvKernelRoutes); err != nil {
		return ec, err
	}
	listen, err := envChoice(getenv, EnvKernelListen, KernelListenLoopback, KernelListenAll, KernelListenNone)
	if err != nil {
		return ec, err
	}
	cfg.KernelListen = listen
	if cfg.Poll, err = envChoice(getenv, EnvPoll, PollAdaptive, PollBusy, PollBlocking); err != nil {
		return ec, err
	}
	// Addresses that cannot work are an error under either fallback
	// policy: the kernel would hide a mistake, not a missing link.
	return ec, cfg.checkAddrs()
}

// envChoice returns the choice whose String is the variable's value; an
// empty value is the first choice.
func envChoice[T fmt.Stringer](getenv func(string) string, name string, choices ...T) (T, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return choices[0], nil
	}
	names := make([]string, len(choices))
	for i, c := range choices {
		if c.String() == v {
			return c, nil
		}
		names[i] = c.String()
	}
	want := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	return choices[0], fmt.Errorf("polarnet: %s=%q: want %s", name, v, want)
}

// envPrefixes parses a comma-separated list of prefixes.
func envPrefixes(getenv func(string) string, name string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range splitList(getenv(name)) {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("polarnet: %s: %w", name, err)
		}
		out = append(out, pfx)
	}
	return out, nil
}

func envInt(getenv func(string) string, name string) (int, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("polarnet: %s=%q: want a non-negative integer", name, v)
	}
	return n, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseOptions(s string) (map[string]string, error) {
	opts := map[string]string{}
	for _, kv := range splitList(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("polarnet: %s: %q is not key=value", EnvLinkOptions, kv)
		}
		opts[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return opts, nil
}

func parseDNSServer(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(a, 53), nil
}

var defaultStack struct {
	sync.Mutex
	set   bool
	stack *Stack
	err   error
}

// SetDefault makes s the stack that dialer and listener use when none is
// given; nil means Go's net. It overrides the environment.
func SetDefault(s *Stack) {
	defaultStack.Lock()
	defer defaultStack.Unlock()
	defaultStack.set, defaultStack.stack, defaultStack.err = true, s, nil
}

// Default returns the default stack: the one given to SetDefault, else one
// built once from the environment. (nil, nil) means use Go's net: nothing is
// configured, or the link failed to open under FallbackKernel (logged once
// with slog). Under FallbackFail a link that cannot open is an error.
func Default() (*Stack, error) {
	defaultStack.Lock()
	defer defaultStack.Unlock()
	if !defaultStack.set {
		defaultStack.set = true
		defaultStack.stack, defaultStack.err = NewFromEnv(os.Getenv)
	}
	return defaultStack.stack, defaultStack.err
}

// NewFromEnv builds a stack from the POLARNET_* variables read through getenv
// (os.Getenv when nil). (nil, nil) means Go's net: no link is configured, or
// the stack failed to start on it under FallbackKernel, which logs the link,
// the device and the error with slog. Variables that do not parse, or
// addresses that cannot work, are errors under either policy.
func NewFromEnv(getenv func(string) string) (*Stack, error) {
	ec, err := ParseEnv(getenv)
	if err != nil || ec.Kind == "" {
		return nil, err
	}
	s, err := openEnvStack(ec)
	if err == nil {
		return s, nil
	}
	if ec.Fallback == FallbackFail {
		return nil, err
	}
	slog.Warn(fmt.Sprintf("polarnet: %s=%s on device %q failed, so dials and listens use the kernel's TCP/IP (%s=fail makes this an error): %v",
		EnvLink, ec.Kind, ec.Params.Device, EnvFallback, err), "link", ec.Kind, "device", ec.Params.Device, "err", err)
	return nil, nil
}

func openEnvStack(ec EnvConfig) (*Stack, error) {
	l, err := link.Open(ec.Kind, ec.Params)
	if err != nil {
		return nil, err
	}
	ec.Config.Link = l
	return New(ec.Config)
}
