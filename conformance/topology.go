package conformance

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/internal/testenv"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/capture"
	"github.com/polarnet/polarnet/link/impair"
	"github.com/polarnet/polarnet/polarnet"
)

// Direction says who plays client and server in a run.
type Direction string

const (
	// KernelKernel is the reference: kernel client, kernel server, joined
	// by a relay through the same impairment and capture as the others.
	KernelKernel Direction = "k2k"
	// StackClient is a polarnet client with a kernel server.
	StackClient Direction = "p2k"
	// StackServer is a kernel client with a polarnet server.
	StackServer Direction = "k2p"
	// StackStack is a polarnet client with a polarnet server, their links'
	// kernel sides joined by a bridge.
	StackStack Direction = "p2p"
)

// Directions lists the directions in the order runs and the matrix use.
var Directions = []Direction{KernelKernel, StackClient, StackServer, StackStack}

// Title is how the matrix heads a direction.
func (d Direction) Title() string {
	switch d {
	case KernelKernel:
		return "kernel ↔ kernel (reference)"
	case StackClient:
		return "polarnet client → kernel server"
	case StackServer:
		return "kernel client → polarnet server"
	case StackStack:
		return "polarnet ↔ polarnet"
	}
	return string(d)
}

// Spec shapes a topology. The zero value is MTU 1500 on both sides,
// offloads on, no impairment.
type Spec struct {
	// MTU is the near side's MTU (the client's, but the server's in
	// StackServer), FarMTU the far side's; zero: 1500 and MTU.
	MTU, FarMTU int
	// WireFrames turns link offloads off, so that every captured frame is a
	// wire packet (scenarios that check frame and segment sizes). Relays
	// and impaired links never use offloads.
	WireFrames bool
	// Impair impairs the path between the sides (both directions as
	// configured: Egress is near→far).
	Impair impair.Config
	// Stack adjusts the polarnet stacks' config.
	Stack func(*polarnet.Config)
	// Queues is the queue count of the polarnet stacks' links, hence their
	// shard count (zero: 1). Relays always use one queue.
	Queues int
}

// Topology is a built run: two hosts joined by a link of the selected kind,
// with capture (and impairment) on the near side's link.
//
//	near (198.18.0.2, fd00:198:18::2) ── capture ── impair ── link ── far (198.18.0.1, fd00:198:18::1)
//
// The near side is the one polarnet plays in StackClient and StackServer;
// in KernelKernel it is a kernel in a namespace of its own, behind a relay.
type Topology struct {
	Dir            Direction
	Near, Far      Host
	Client, Server Host
	// Capture holds the frames crossing the near side's link: Out is
	// near→far, before impairment; In is far→near, after it.
	Capture *capture.Buffer
	// Impair is the impairment decorator, nil without impairment.
	Impair *impair.Link
	// Relay joins the kernels in KernelKernel.
	Relay *impair.Relay
	// FarNS holds the far side's end of the link (the far kernel's
	// namespace, or the bridge's in StackStack) and FarDev is that end:
	// setting it down cuts the path.
	FarNS  *netns.NS
	FarDev string
	// NearMTU and FarMTU are the sides' MTUs.
	NearMTU, FarMTU int
	// Namespaces and Devices name what Build created, for the suite's
	// check that teardown left nothing behind.
	Namespaces, Devices []string
}

// ClientMTU and ServerMTU are the MTUs of the client's and the server's side.
func (tp *Topology) ClientMTU() int {
	if tp.ClientIsNear() {
		return tp.NearMTU
	}
	return tp.FarMTU
}

func (tp *Topology) ServerMTU() int {
	if tp.ClientIsNear() {
		return tp.FarMTU
	}
	return tp.NearMTU
}

// ClientIsNear reports whether the client is the near side, so that Out
// frames are the client's.
func (tp *Topology) ClientIsNear() bool { return tp.Client == tp.Near }

// FromClient reports whether a captured frame was sent by the client.
func (tp *Topology) FromClient(p *capture.Packet) bool {
	return (p.Dir == capture.Out) == tp.ClientIsNear()
}

// captureSnaplen keeps Ethernet, IP and TCP headers with options.
const captureSnaplen = 160

// captureLimit bounds the frames a run keeps (a 256 MiB transfer sends
// hundreds of thousands): the scenarios look at the first ones.
const captureLimit = 400_000

// Build builds the topology of dir over links of kind k; t's cleanups tear
// it down (stacks and relays first, namespaces last), also on failure.
func Build(t testing.TB, k Kind, dir Direction, spec Spec) (*Topology, error) {
	t.Helper()
	mtu, farMTU := spec.MTU, spec.FarMTU
	if mtu == 0 {
		mtu = 1500
	}
	if farMTU == 0 {
		farMTU = mtu
	}
	impaired := spec.Impair != (impair.Config{})
	offloads := !spec.WireFrames && !impaired
	tp := &Topology{Dir: dir, NearMTU: mtu, FarMTU: farMTU, Capture: capture.NewBuffer(capture.BufferConfig{Snaplen: captureSnaplen, Limit: captureLimit})}
	wrap := func(l link.Link) link.Link {
		if impaired {
			tp.Impair = impair.New(l, spec.Impair)
			l = tp.Impair
		}
		return capture.New(l, tp.Capture)
	}
	nearAddrs, farAddrs := taptopo.StackPrefixes(mtu), taptopo.KernelPrefixes(farMTU)
	newStack := func(link link.Link, addrs []netip.Prefix) (*stackHost, error) {
		cfg := polarnet.Config{Link: link, Addrs: addrs}
		if spec.Stack != nil {
			spec.Stack(&cfg)
		}
		mac := link.Info().MAC
		st, err := polarnet.New(cfg)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { st.Close() })
		return &stackHost{st: st, mac: mac}, nil
	}

	switch dir {
	case KernelKernel:
		k = referenceKind(k)
		nearNS, farNS := testenv.NewNS(t), testenv.NewNS(t)
		nearLink, nearDev, err := k.Attach(nearNS, AttachOptions{MTU: mtu, Addrs: nearAddrs})
		if err != nil {
			return nil, err
		}
		farLink, farDev, err := k.Attach(farNS, AttachOptions{MTU: farMTU, Addrs: farAddrs})
		if err != nil {
			return nil, errors.Join(err, nearLink.Close())
		}
		if tp.Relay, err = impair.NewRelay(nearLink, wrap(farLink)); err != nil {
			return nil, err
		}
		t.Cleanup(func() { tp.Relay.Close() })
		if tp.Near, err = newKernelHost(nearNS, nearDev, nearAddrs); err != nil {
			return nil, err
		}
		tp.FarNS, tp.FarDev = farNS, farDev
		tp.Namespaces, tp.Devices = []string{nearNS.Name, farNS.Name}, []string{nearDev, farDev}

	case StackClient, StackServer:
		farNS := testenv.NewNS(t)
		link, farDev, err := k.Attach(farNS, AttachOptions{MTU: mtu, PeerMTU: farMTU, Offloads: offloads, Addrs: farAddrs, Queues: spec.Queues})
		if err != nil {
			return nil, err
		}
		if tp.Near, err = newStack(wrap(link), nearAddrs); err != nil {
			return nil, err
		}
		tp.FarNS, tp.FarDev = farNS, farDev
		tp.Namespaces, tp.Devices = []string{farNS.Name}, []string{farDev}

	case StackStack:
		brNS := testenv.NewNS(t)
		if _, err := brNS.Exec("ip", "link", "add", "br0", "type", "bridge"); err != nil {
			return nil, err
		}
		nearLink, nearDev, err := k.Attach(brNS, AttachOptions{MTU: mtu, Offloads: offloads, Queues: spec.Queues})
		if err != nil {
			return nil, err
		}
		farLink, farDev, err := k.Attach(brNS, AttachOptions{MTU: farMTU, Offloads: offloads, Queues: spec.Queues})
		if err != nil {
			return nil, errors.Join(err, nearLink.Close())
		}
		near, err := newStack(wrap(nearLink), nearAddrs)
		if err != nil {
			return nil, errors.Join(err, farLink.Close())
		}
		far, err := newStack(farLink, farAddrs)
		if err != nil {
			return nil, err
		}
		for _, dev := range []string{nearDev, farDev} {
			if _, err := brNS.Exec("ip", "link", "set", dev, "master", "br0"); err != nil {
				return nil, err
			}
		}
		if _, err := brNS.Exec("ip", "link", "set", "br0", "up"); err != nil {
			return nil, err
		}
		tp.Near, tp.Far, tp.FarNS, tp.FarDev = near, far, brNS, farDev
		tp.Namespaces, tp.Devices = []string{brNS.Name}, []string{nearDev, farDev}

	default:
		return nil, fmt.Errorf("conformance: unknown direction %q", dir)
	}
	if tp.Far == nil {
		// The far side is the kernel at the far end of the link.
		var err error
		if tp.Far, err = newKernelHost(tp.FarNS, tp.FarDev, farAddrs); err != nil {
			return nil, err
		}
	}
	tp.Client, tp.Server = tp.Near, tp.Far
	if dir == StackServer {
		tp.Client, tp.Server = tp.Far, tp.Near
	}
	return tp, nil
}
