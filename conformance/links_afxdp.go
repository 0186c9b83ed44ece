package conformance

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/link/afxdp"
	"github.com/polarnet/polarnet/polarnet"
)

func init() { Register(afxdpKind{}) }

// afxdpKind attaches AF_XDP links to veth pairs. The link's end stays in
// this process's namespace, where afxdp.New runs; the other end is the
// kernel interface, moved into the scenario's namespace with the offloads
// the kernel gives a veth left on, as a production peer has them: its TCP
// frames arrive checksum-partial, which the link must handle.
// AttachOptions.Offloads says whether the link claims checksum offload
// (off: afxdp.Config.DisableOffloads, the engine computes and verifies every
// checksum); the kernel end's offloads stay on either way. AF_XDP has no
// segmentation offload: every frame is a wire frame.
type afxdpKind struct{}

func (afxdpKind) Name() string { return "afxdp" }

// afxdpCarrierWait bounds the wait for both ends of a new veth pair to be up.
const afxdpCarrierWait = 5 * time.Second

func (afxdpKind) Attach(ns *netns.NS, opt AttachOptions) (_ polarnet.Link, _ string, err error) {
	local, peer := netns.UniqueName("pnx"), netns.UniqueName("pnx")
	queues := max(1, opt.Queues)
	q := strconv.Itoa(queues)
	peerMTU := cmp.Or(opt.PeerMTU, opt.MTU)
	if err := afxdpIP("link", "add", "dev", local, "numtxqueues", q, "numrxqueues", q,
		"type", "veth", "peer", "name", peer, "numtxqueues", q, "numrxqueues", q); err != nil {
		return nil, "", err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, afxdpDeleteVeth(local))
		}
	}()
	// The link's end has no address of the host's: IPv6 off, so that the
	// host sends no router or neighbour solicitations into the scenario.
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+local+"/disable_ipv6", []byte("1"), 0); err != nil {
		return nil, "", fmt.Errorf("conformance: %s: %w", local, err)
	}
	// veth drops frames longer than the receiving end's MTU: the link's end
	// takes whatever either side sends, the link reports opt.MTU.
	if err := afxdpIP("link", "set", "dev", local, "mtu", strconv.Itoa(max(opt.MTU, peerMTU)), "up"); err != nil {
		return nil, "", err
	}
	if err := taptopo.Plug(ns, peer, peerMTU, opt.Addrs...); err != nil {
		return nil, "", err
	}
	if err := afxdpWaitCarrier(ns, local, peer); err != nil {
		return nil, "", err
	}
	l, err := afxdp.New(afxdp.Config{
		Interface: local,
		// The link's end is the stack's alone, as a TAP device is.
		Filter:          afxdp.FilterAll,
		Queues:          queues,
		MTU:             opt.MTU,
		DisableOffloads: !opt.Offloads,
	})
	if err != nil {
		return nil, "", err
	}
	return &afxdpVethLink{Link: l, dev: local}, peer, nil
}

// afxdpVethLink is an AF_XDP link that deletes its veth pair when closed, so
// that nothing is left in this namespace even before the scenario's
// namespace, which holds the other end, is deleted.
type afxdpVethLink struct {
	*afxdp.Link
	dev string
}

func (l *afxdpVethLink) Close() error {
	if err := l.Link.Close(); err != nil {
		return err
	}
	return afxdpDeleteVeth(l.dev)
}

// afxdpDeleteVeth deletes the veth pair whose end dev is in this namespace,
// unless it went with the other end's namespace.
func afxdpDeleteVeth(dev string) error {
	if _, err := net.InterfaceByName(dev); err != nil {
		return nil
	}
	return afxdpIP("link", "del", "dev", dev)
}

// afxdpWaitCarrier waits until the kernel has processed the carrier of both
// ends (linkwatch, up to a second late): until then the peer's queueing
// discipline is the no-op one, which drops every frame, and the scenario's
// first SYN would wait for its retransmission.
func afxdpWaitCarrier(ns *netns.NS, local, peer string) error {
	deadline := time.Now().Add(afxdpCarrierWait)
	for {
		state, err := os.ReadFile("/sys/class/net/" + local + "/operstate")
		if err != nil {
			return fmt.Errorf("conformance: %s: %w", local, err)
		}
		out, err := ns.Exec("ip", "-o", "link", "show", "dev", peer)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(state)) == "up" && strings.Contains(out, "state UP") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("conformance: veth %s/%s not up after %v: %s / %s", local, peer, afxdpCarrierWait, strings.TrimSpace(string(state)), strings.TrimSpace(out))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// afxdpIP runs ip with args; the error quotes ip's explanation.
func afxdpIP(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
