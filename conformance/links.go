package conformance

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/tap"
)

// Kind is a kind of link the suite runs polarnet over: what `-link` selects.
// A Kind only knows how to put a link between this process and a kernel
// interface in a namespace; stacks, relays, impairment and capture are
// built on top of its links the same way for every kind.
//
// A new link (AF_XDP on a veth pair, DPDK on af_packet) joins the suite by
// implementing Kind and calling Register from an init function in this
// package.
type Kind interface {
	// Name is the value of -link (and POLARNET_CONFORMANCE_LINK).
	Name() string
	// Attach creates a link whose far end is a kernel interface in ns,
	// moved there, configured as opt says and up, and returns the link and
	// that interface's name. The caller owns the link (a stack or a relay
	// closes it); the interface goes away with the link or the namespace.
	Attach(ns *netns.NS, opt AttachOptions) (link.Link, string, error)
}

// SingleLink is implemented by kinds that can attach one link at a time
// (one physical peer, as RDMA's): their k2k reference runs over TAP, the
// kernel's path that needs no hardware, and p2p, which needs two links of
// the kind, is skipped.
type SingleLink interface {
	SingleLink()
}

// referenceKind is the kind the k2k reference of a run over k uses.
func referenceKind(k Kind) Kind {
	if _, single := k.(SingleLink); single {
		return tapKind{}
	}
	return k
}

// AttachOptions say how to attach a link.
type AttachOptions struct {
	// MTU is the link's MTU, the polarnet side's.
	MTU int
	// PeerMTU is the kernel interface's MTU (zero: MTU). It differs from
	// MTU in the mismatched-MTU scenarios.
	PeerMTU int
	// Offloads lets the link use checksum and segmentation offloads. The
	// suite turns them off where frames must be wire packets: relays,
	// impairment, scenarios that inspect frame sizes.
	Offloads bool
	// Addrs are the kernel interface's addresses; none for a bridge port.
	Addrs []netip.Prefix
	// Queues is the number of queue pairs the link should have (zero: 1).
	// A kind that cannot give several gives one.
	Queues int
}

var (
	kindsMu sync.Mutex
	kinds   = map[string]Kind{}
)

// Register makes a Kind selectable by its name.
func Register(k Kind) {
	kindsMu.Lock()
	defer kindsMu.Unlock()
	kinds[k.Name()] = k
}

// Lookup returns the Kind registered under name.
func Lookup(name string) (Kind, error) {
	kindsMu.Lock()
	defer kindsMu.Unlock()
	if k, ok := kinds[name]; ok {
		return k, nil
	}
	names := make([]string, 0, len(kinds))
	for n := range kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return nil, fmt.Errorf("conformance: unknown link %q (registered: %s)", name, strings.Join(names, ", "))
}

func init() { Register(tapKind{}) }

// tapKind attaches TAP devices: the kernel side is the TAP interface itself,
// moved into the namespace.
type tapKind struct{}

func (tapKind) Name() string { return "tap" }

func (tapKind) Attach(ns *netns.NS, opt AttachOptions) (link.Link, string, error) {
	link, err := tap.New(tap.Config{Name: netns.UniqueName("pnc"), MTU: opt.MTU, Queues: opt.Queues, DisableOffloads: !opt.Offloads})
	if err != nil {
		return nil, "", err
	}
	dev := link.Info().Name
	peerMTU := opt.PeerMTU
	if peerMTU == 0 {
		peerMTU = opt.MTU
	}
	if err := taptopo.Plug(ns, dev, peerMTU, opt.Addrs...); err != nil {
		link.Close()
		return nil, "", err
	}
	return link, dev, nil
}
