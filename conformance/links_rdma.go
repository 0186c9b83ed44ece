//go:build rdma && linux

package conformance

import (
	"cmp"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/rdma"
)

// The RDMA kind (-link=rdma, in test binaries built with -tags rdma and
// cgo): polarnet drives an RDMA-capable interface (an mlx5 port) through
// link/rdma's raw packet queue pairs, and the kernel peer is a second,
// physical interface on the same Ethernet segment (the card's other port
// cabled back to back, or a port on the same switch), moved into the
// scenario's namespace for the run.
//
//	this process: polarnet ── rdma.Link ── POLARNET_RDMA_NETDEV (host
//	namespace) ══ cable/switch ══ POLARNET_RDMA_PEER_NETDEV (namespace ns,
//	renamed pnr…: the kernel peer)
//
// It needs root, both environment variables (the names link/rdma's
// TestHardware uses) and hardware; see link/rdma/README.md. Without the
// variables Attach fails saying what to set.
//
// There is one physical peer, so there is one attachment at a time: a
// second Attach while a link is open fails saying so. The kind is a
// SingleLink: the k2k reference of each scenario runs over TAP and p2p,
// which needs two links, is skipped; p2k and k2p run over RDMA.
//
// Attach:
//   - gives the link a MAC of its own (random, locally administered), so
//     that flow rules take every frame to it and nothing else, whatever the
//     stack's addresses; Config.Addrs are the topology's addresses that the
//     kernel peer does not have (AttachOptions.Addrs are the peer's), which
//     gets the link copies of the neighbour solicitations for them;
//   - raises the RDMA interface's MTU to max(MTU, PeerMTU) when it is lower
//     (as the veth kinds do, so that the link sees what the peer sends),
//     failing if the device refuses; the link reports MTU;
//   - moves the peer interface into ns under a unique name (so that
//     several scenarios' namespaces never hold a name the suite's leftover
//     check finds in the host namespace once it is back), sets its MTU
//     (PeerMTU, else MTU) and addresses and brings it up, then waits until
//     both carriers are up and the RDMA port is ACTIVE: a physical link
//     renegotiates after each move and MTU change;
//   - AttachOptions.Offloads: link/rdma has no offload switch. Its links
//     complete TX checksums in software while they copy a frame
//     (CapTXChecksum) and report the device's RX checksum verification
//     (CapRXChecksum); there is no segmentation offload, so every frame is
//     a wire frame. With Offloads off the link hides CapTXChecksum, so the
//     engine computes every checksum itself and captured frames carry
//     complete ones. The peer NIC keeps its offloads: on a wire its frames
//     are complete either way.
//
// Closing the link releases the attachment: it moves the peer back into
// this process's namespace under its own name (or, when ns was deleted
// first, waits for the kernel to return it to the initial namespace, which
// must then be this one), restores its MTU and up/down state and the RDMA
// interface's MTU, so that the next scenario can move it again.
func init() { Register(rdmaKind{}) }

// SingleLink marks the kind as one that attaches one link at a time.
func (rdmaKind) SingleLink() {}

// Environment of the rdma kind: the same variables as link/rdma's
// TestHardware (defined there in a test file, hence again here).
const (
	// EnvRDMANetdev names the RDMA-capable interface polarnet drives.
	EnvRDMANetdev = "POLARNET_RDMA_NETDEV"
	// EnvRDMAPeerNetdev names the interface on the same Ethernet segment
	// that plays the kernel peer.
	EnvRDMAPeerNetdev = "POLARNET_RDMA_PEER_NETDEV"
)

// rdmaWait bounds the waits for a physical link: carriers after a move or
// an MTU change (autonegotiation takes seconds), and the peer's return to
// this namespace after its namespace is deleted.
const rdmaWait = 30 * time.Second

type rdmaKind struct{}

func (rdmaKind) Name() string { return "rdma" }

// rdmaSlot is the one attachment: held from Attach until the link closes.
var rdmaSlot struct {
	sync.Mutex
	busy bool
	peer string // the peer's name in the namespace
	ns   string // and that namespace
}

// rdmaAcquire takes the attachment, or says who holds it.
func rdmaAcquire(peer string) error {
	rdmaSlot.Lock()
	defer rdmaSlot.Unlock()
	if rdmaSlot.busy {
		where := ""
		if rdmaSlot.ns != "" {
			where = fmt.Sprintf(" (as %s in namespace %s)", rdmaSlot.peer, rdmaSlot.ns)
		}
		return fmt.Errorf("conformance: rdma: the kernel peer %s=%s is already attached%s: this kind has one physical peer, "+
			"so one link at a time (the suite runs its k2k reference over TAP and skips p2p for this kind)",
			EnvRDMAPeerNetdev, peer, where)
	}
	rdmaSlot.busy, rdmaSlot.peer, rdmaSlot.ns = true, "", ""
	return nil
}

func rdmaRelease() {
	rdmaSlot.Lock()
	defer rdmaSlot.Unlock()
	rdmaSlot.busy, rdmaSlot.peer, rdmaSlot.ns = false, "", ""
}

// rdmaEnv reads the kind's environment; the error says what to set.
func rdmaEnv() (dev, peer string, err error) {
	dev, peer = os.Getenv(EnvRDMANetdev), os.Getenv(EnvRDMAPeerNetdev)
	if dev == "" || peer == "" {
		var missing []string
		if dev == "" {
			missing = append(missing, EnvRDMANetdev)
		}
		if peer == "" {
			missing = append(missing, EnvRDMAPeerNetdev)
		}
		return "", "", fmt.Errorf("conformance: -link=rdma needs %s: set %s to the RDMA-capable interface polarnet drives "+
			"(an mlx5 port with raw packet support) and %s to another interface on the same Ethernet segment, "+
			"which the suite moves into each scenario's namespace as the kernel peer; both need root and hardware, "+
			"see link/rdma/README.md (\"Hardware test\")", strings.Join(missing, " and "), EnvRDMANetdev, EnvRDMAPeerNetdev)
	}
	if dev == peer {
		return "", "", fmt.Errorf("conformance: -link=rdma: %s and %s both name %s; the kernel peer must be another interface "+
			"on the same Ethernet segment (see link/rdma/README.md)", EnvRDMANetdev, EnvRDMAPeerNetdev, dev)
	}
	return dev, peer, nil
}

// rdmaCheckPeer checks that peer is an interface of this namespace that can
// be lent to the suite: not loopback, and without addresses (moving it into
// a namespace deletes them, and they would not come back).
func rdmaCheckPeer(peer string) (*net.Interface, error) {
	ifi, err := net.InterfaceByName(peer)
	if err != nil {
		return nil, fmt.Errorf("conformance: rdma: %s=%s: no such interface in this namespace (%v; `ip -br link` lists them)",
			EnvRDMAPeerNetdev, peer, err)
	}
	if ifi.Flags&net.FlagLoopback != 0 {
		return nil, fmt.Errorf("conformance: rdma: %s=%s is a loopback interface; the kernel peer must be an interface "+
			"on the RDMA port's Ethernet segment", EnvRDMAPeerNetdev, peer)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return nil, fmt.Errorf("conformance: rdma: %s=%s: %w", EnvRDMAPeerNetdev, peer, err)
	}
	var kept []string
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && !p.Addr().IsLinkLocalUnicast() {
			kept = append(kept, p.String())
		}
	}
	if len(kept) > 0 {
		return nil, fmt.Errorf("conformance: rdma: %s=%s has addresses (%s); moving it into a scenario's namespace would delete them "+
			"for good: lend the suite an interface without any (`ip addr flush dev %s`)",
			EnvRDMAPeerNetdev, peer, strings.Join(kept, ", "), peer)
	}
	return ifi, nil
}

// rdmaStackAddrs are the addresses the link's side answers for: the
// topology's addresses (taptopo's both sides) that the kernel peer does not
// have.
func rdmaStackAddrs(peer []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, p := range append(taptopo.StackPrefixes(0), taptopo.KernelPrefixes(0)...) {
		mine := false
		for _, q := range peer {
			mine = mine || q.Addr() == p.Addr()
		}
		if !mine {
			out = append(out, p.Addr())
		}
	}
	return out
}

// rdmaAttachment undoes an Attach, step by step: each field is set once
// its step is done.
type rdmaAttachment struct {
	dev, peer string
	ns        *netns.NS
	// devMTU is the RDMA interface's MTU before Attach raised it (0: left).
	devMTU int
	// peerMTU and peerUp are the peer's MTU and state before the move.
	peerMTU int
	peerUp  bool
	// moved is the peer's name in ns once it was moved ("": not moved).
	moved string
}

func (rdmaKind) Attach(ns *netns.NS, opt AttachOptions) (link.Link, string, error) {
	dev, peer, err := rdmaEnv()
	if err != nil {
		return nil, "", err
	}
	if err := rdmaAcquire(peer); err != nil {
		return nil, "", err
	}
	a := &rdmaAttachment{dev: dev, peer: peer, ns: ns}
	l, err := a.attach(opt)
	if err != nil {
		return nil, "", errors.Join(err, a.release())
	}
	return l, a.moved, nil
}

func (a *rdmaAttachment) attach(opt AttachOptions) (link.Link, error) {
	// Both interfaces are checked before anything changes, and both
	// problems reported at once.
	port, devErr := rdma.LookupNetdev(a.dev)
	if devErr != nil {
		devErr = fmt.Errorf("conformance: rdma: %s=%s: %w (see link/rdma/README.md)", EnvRDMANetdev, a.dev, devErr)
	} else if !port.RawPacket() {
		devErr = fmt.Errorf("conformance: rdma: %s=%s: %v: its driver is not known to offer raw packet queue pairs "+
			"(see link/rdma/README.md for the NICs that do)", EnvRDMANetdev, a.dev, port)
	}
	peerIf, peerErr := rdmaCheckPeer(a.peer)
	if err := errors.Join(devErr, peerErr); err != nil {
		return nil, err
	}
	devIf, err := net.InterfaceByName(a.dev)
	if err != nil {
		return nil, fmt.Errorf("conformance: rdma: %s=%s: %w", EnvRDMANetdev, a.dev, err)
	}
	if devIf.Flags&net.FlagUp == 0 {
		return nil, fmt.Errorf("conformance: rdma: %s=%s is down; bring it up (`ip link set dev %s up`) and check its cable",
			EnvRDMANetdev, a.dev, a.dev)
	}

	mtu := cmp.Or(opt.MTU, 1500)
	peerMTU := cmp.Or(opt.PeerMTU, mtu)
	// The NIC drops frames longer than its interface's MTU: it must take
	// whatever the peer sends, as the veth kinds' link ends do.
	if wire := max(mtu, peerMTU); devIf.MTU < wire {
		if err := runIP("link", "set", "dev", a.dev, "mtu", strconv.Itoa(wire)); err != nil {
			return nil, fmt.Errorf("conformance: rdma: raising %s's MTU from %d to %d for this run (the device does not allow it?): %w",
				a.dev, devIf.MTU, wire, err)
		}
		a.devMTU = devIf.MTU
	}

	if err := a.lendPeer(peerIf, peerMTU, opt.Addrs); err != nil {
		return nil, err
	}

	mac := make(net.HardwareAddr, 6)
	rand.Read(mac)
	mac[0] = mac[0]&^1 | 2
	l, err := rdma.New(rdma.Config{
		Netdev: a.dev,
		Queues: max(1, opt.Queues),
		MTU:    mtu,
		MAC:    mac,
		Addrs:  rdmaStackAddrs(opt.Addrs),
	})
	if err != nil {
		return nil, fmt.Errorf("conformance: rdma: opening the link on %s: %w", a.dev, err)
	}
	if err := a.waitUp(port); err != nil {
		return nil, errors.Join(err, l.Close())
	}
	info := l.Info()
	if !opt.Offloads {
		info.Caps &^= link.CapTXChecksum
	}
	return &rdmaLink{Link: l, info: info, att: a}, nil
}

// lendPeer moves the peer into ns under a unique name, with MTU mtu and
// addrs, up. Moving takes an interface down, and it is renamed while down;
// Configure brings it up.
func (a *rdmaAttachment) lendPeer(peerIf *net.Interface, mtu int, addrs []netip.Prefix) error {
	a.peerMTU, a.peerUp = peerIf.MTU, peerIf.Flags&net.FlagUp != 0
	moved := netns.UniqueName("pnr")
	if err := runIP("link", "set", "dev", a.peer, "netns", a.ns.Name); err != nil {
		return err
	}
	a.moved = a.peer
	if err := runIP("-n", a.ns.Name, "link", "set", "dev", a.peer, "name", moved); err != nil {
		return err
	}
	a.moved = moved
	rdmaSlot.Lock()
	rdmaSlot.peer, rdmaSlot.ns = moved, a.ns.Name
	rdmaSlot.Unlock()
	return a.ns.Configure(moved, mtu, addrs...)
}

// waitUp waits until the RDMA interface and the peer have carrier (their
// kernels have processed it: until then the peer's queueing discipline
// drops every frame) and the RDMA port is ACTIVE.
func (a *rdmaAttachment) waitUp(port rdma.Port) error {
	state := filepath.Join("/sys/class/infiniband", port.Device, "ports", strconv.Itoa(max(port.Port, 1)), "state")
	deadline := time.Now().Add(rdmaWait)
	for {
		devUp, peerUp := running(a.dev), false
		nsErr := a.ns.Do(func() error { peerUp = running(a.moved); return nil })
		s, _ := os.ReadFile(state)
		active := strings.Contains(string(s), "ACTIVE")
		if devUp && peerUp && active {
			return nil
		}
		if nsErr != nil {
			return nsErr
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("conformance: rdma: after %v, %s running: %t, peer %s (%s in %s) running: %t, %s port %d: %q; "+
				"are the two interfaces cabled to each other or to the same switch?",
				rdmaWait, a.dev, devUp, a.peer, a.moved, a.ns.Name, peerUp, port.Device, port.Port, strings.TrimSpace(string(s)))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running reports whether the interface name of the calling thread's
// namespace is up with carrier (IFF_RUNNING).
func running(name string) bool {
	ifi, err := net.InterfaceByName(name)
	return err == nil && ifi.Flags&net.FlagRunning != 0
}

// release undoes what attach did, returns the peer to this namespace under
// its own name and frees the attachment, whatever fails on the way.
func (a *rdmaAttachment) release() error {
	defer rdmaRelease()
	var errs []error
	if a.moved != "" {
		errs = append(errs, a.returnPeer())
	}
	if a.devMTU != 0 {
		if err := runIP("link", "set", "dev", a.dev, "mtu", strconv.Itoa(a.devMTU)); err != nil {
			errs = append(errs, fmt.Errorf("conformance: rdma: restoring %s's MTU: %w", a.dev, err))
		}
	}
	return errors.Join(errs...)
}

// returnPeer brings the peer back from ns and restores its name, MTU and
// state.
func (a *rdmaAttachment) returnPeer() error {
	here := a.moved
	if _, err := os.Stat(filepath.Join("/run/netns", a.ns.Name)); err == nil {
		if err := runIP("-n", a.ns.Name, "link", "set", "dev", a.moved, "netns", strconv.Itoa(os.Getpid())); err != nil {
			return fmt.Errorf("conformance: rdma: returning the peer %s from namespace %s: %w", a.moved, a.ns.Name, err)
		}
	} else {
		// The namespace went first: the kernel returns a physical
		// interface to the initial namespace when it deletes the
		// namespace, asynchronously (and under a name of the form devN
		// if its own is taken there).
		deadline := time.Now().Add(rdmaWait)
		for {
			if _, err := net.InterfaceByName(a.moved); err == nil {
				break
			}
			if _, err := net.InterfaceByName(a.peer); err == nil {
				here = a.peer
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("conformance: rdma: the peer %s (%s in deleted namespace %s) is not back in this namespace after %v; "+
					"the kernel returns it to the initial network namespace: is this process in another one? (`ip -br link` there)",
					a.peer, a.moved, a.ns.Name, rdmaWait)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Back here, and down (a move takes an interface down), so it can be
	// renamed.
	var errs []error
	if here != a.peer {
		if err := runIP("link", "set", "dev", here, "name", a.peer); err != nil {
			return fmt.Errorf("conformance: rdma: the peer is back as %s but could not take its name %s again: %w", here, a.peer, err)
		}
	}
	if err := runIP("link", "set", "dev", a.peer, "mtu", strconv.Itoa(a.peerMTU)); err != nil {
		errs = append(errs, fmt.Errorf("conformance: rdma: restoring %s's MTU: %w", a.peer, err))
	}
	if a.peerUp {
		if err := runIP("link", "set", "dev", a.peer, "up"); err != nil {
			errs = append(errs, fmt.Errorf("conformance: rdma: bringing %s up again: %w", a.peer, err))
		}
	}
	return errors.Join(errs...)
}

// rdmaLink is an RDMA link of the suite: it reports the capabilities
// AttachOptions asked for, and closing it releases the attachment. It
// embeds *rdma.Link, so the stack still sees a link.Steerer.
type rdmaLink struct {
	*rdma.Link
	info link.Info
	att  *rdmaAttachment

	once sync.Once
	err  error
}

func (l *rdmaLink) Info() link.Info { return l.info }

func (l *rdmaLink) Close() error {
	l.once.Do(func() { l.err = errors.Join(l.Link.Close(), l.att.release()) })
	return l.err
}
