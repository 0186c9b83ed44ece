package conformance

import (
	"cmp"
	"errors"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/afxdp"
)

func init() { Register(afxdpKind{}) }

// afxdpKind attaches AF_XDP links to veth pairs (newHostVeth). The link's
// end stays in this process's namespace, where afxdp.New runs; the other
// end is the kernel interface, in the scenario's namespace with the
// offloads the kernel gives a veth left on, as a production peer has them:
// its TCP frames arrive checksum-partial, which the link must handle.
// AttachOptions.Offloads says whether the link claims checksum offload
// (off: afxdp.Config.DisableOffloads, the engine computes and verifies every
// checksum); the kernel end's offloads stay on either way. AF_XDP has no
// segmentation offload: every frame is a wire frame.
type afxdpKind struct{}

func (afxdpKind) Name() string { return "afxdp" }

func (afxdpKind) Attach(ns *netns.NS, opt AttachOptions) (link.Link, string, error) {
	queues := max(1, opt.Queues)
	peerMTU := cmp.Or(opt.PeerMTU, opt.MTU)
	// veth drops frames longer than the receiving end's MTU: the link's end
	// takes whatever either side sends, the link reports opt.MTU.
	local, peer, err := newHostVeth(ns, "pnx", queues, max(opt.MTU, peerMTU), peerMTU, opt.Addrs)
	if err != nil {
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
		return nil, "", errors.Join(err, deleteVeth(local))
	}
	return &vethLink{Link: l, host: local}, peer, nil
}
