package conformance

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/link"
)

// The wire of the kinds whose link drives an interface of this process's
// namespace (afxdp, and dpdk's net_af_packet): a veth pair whose host end
// stays here, without addresses and with IPv6 and forwarding off, so that
// the host's kernel sends nothing into a scenario and passes on nothing it
// receives, and whose peer end, in the scenario's namespace, is the kernel
// interface.

// vethCarrierWait bounds the wait for both ends of a new veth pair to be up.
const vethCarrierWait = 5 * time.Second

// newHostVeth creates such a pair, names starting with prefix, each end with
// queues queue pairs: the host end with MTU hostMTU, the peer end in ns
// (created there, so that only the host end is ever in this namespace) with
// MTU peerMTU and addrs; both up. It returns once the kernel has seen both
// carriers. On failure nothing is left.
func newHostVeth(ns *netns.NS, prefix string, queues, hostMTU, peerMTU int, addrs []netip.Prefix) (host, peer string, err error) {
	host, peer = netns.UniqueName(prefix), netns.UniqueName(prefix)
	q := strconv.Itoa(max(1, queues))
	if err := runIP("link", "add", "dev", host, "numtxqueues", q, "numrxqueues", q,
		"type", "veth", "peer", "name", peer, "numtxqueues", q, "numrxqueues", q, "netns", ns.Name); err != nil {
		return "", "", err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, deleteVeth(host))
		}
	}()
	for key, value := range map[string]string{
		"net/ipv6/conf/" + host + "/disable_ipv6": "1",
		"net/ipv4/conf/" + host + "/forwarding":   "0",
	} {
		if err := os.WriteFile("/proc/sys/"+key, []byte(value), 0); err != nil {
			return "", "", fmt.Errorf("conformance: %s: %w", key, err)
		}
	}
	if err := runIP("link", "set", "dev", host, "mtu", strconv.Itoa(hostMTU), "up"); err != nil {
		return "", "", err
	}
	if err := ns.Configure(peer, peerMTU, addrs...); err != nil {
		return "", "", err
	}
	if err := waitVethCarrier(ns, host, peer); err != nil {
		return "", "", err
	}
	return host, peer, nil
}

// vethLink is a link on the host end of a veth pair; closing it deletes the
// pair too, so that nothing is left in this namespace even before the
// scenario's namespace, which holds the other end, is deleted.
type vethLink struct {
	link.Link
	host string
}

func (l *vethLink) Close() error {
	return errors.Join(l.Link.Close(), deleteVeth(l.host))
}

// deleteVeth deletes the veth pair whose end host is in this namespace,
// unless it went with the other end's namespace.
func deleteVeth(host string) error {
	if _, err := net.InterfaceByName(host); err != nil {
		return nil
	}
	return runIP("link", "del", "dev", host)
}

// waitVethCarrier waits until the kernel has processed the carrier of both
// ends (linkwatch runs up to a second late): until then the peer's queueing
// discipline is the no-op one, which drops every frame, and a scenario's
// first SYN would wait for its retransmission.
func waitVethCarrier(ns *netns.NS, host, peer string) error {
	deadline := time.Now().Add(vethCarrierWait)
	for {
		state, err := os.ReadFile("/sys/class/net/" + host + "/operstate")
		if err != nil {
			return fmt.Errorf("conformance: %s: %w", host, err)
		}
		out, err := ns.Exec("cat", "/sys/class/net/"+peer+"/operstate")
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(state)) == "up" && strings.TrimSpace(out) == "up" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("conformance: veth %s/%s not up after %v: %s / %s", host, peer, vethCarrierWait, strings.TrimSpace(string(state)), strings.TrimSpace(out))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runIP runs ip with args; the error quotes ip's explanation.
func runIP(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
