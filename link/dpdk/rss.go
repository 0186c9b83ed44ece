package dpdk

import (
	"fmt"
	"net/netip"

	"github.com/polarnet/polarnet/internal/toeplitz"
)

// rssSteerer predicts the RX queue of a flow the way a NIC's RSS picks it:
// the Toeplitz hash of the received frame's 4-tuple (source: the remote
// end) indexes the RETA by its low bits.
type rssSteerer struct {
	key  *toeplitz.Key
	reta []uint16
}

// newRSSSteerer returns a steerer for a port hashing with key over the
// RTE_ETH_RSS_* types hf, with indirection table reta spreading over queues
// queues. It fails unless TCP and UDP over IPv4 and IPv6 are hashed over
// addresses and ports (then a local port choice decides the queue) and
// every RETA entry names one of the queues.
func newRSSSteerer(key []byte, hf uint64, reta []uint16, queues int) (*rssSteerer, error) {
	if hf&rssL4FourTuple != rssL4FourTuple {
		return nil, fmt.Errorf("dpdk: RSS types %#x do not hash TCP and UDP over IPv4 and IPv6 by ports", hf)
	}
	if len(reta) == 0 {
		return nil, fmt.Errorf("dpdk: empty RETA")
	}
	for i, q := range reta {
		if int(q) >= queues {
			return nil, fmt.Errorf("dpdk: RETA entry %d names queue %d of %d", i, q, queues)
		}
	}
	k, err := toeplitz.NewKey(key)
	if err != nil {
		return nil, err
	}
	if k.MaxInput() < toeplitz.MaxInput {
		return nil, fmt.Errorf("dpdk: RSS key of %d bytes cannot hash IPv6 4-tuples", len(key))
	}
	return &rssSteerer{key: k, reta: append([]uint16(nil), reta...)}, nil
}

// RxQueue implements link.Steerer.
func (s *rssSteerer) RxQueue(local, remote netip.AddrPort) int {
	var buf [toeplitz.MaxInput]byte
	in := toeplitz.Tuple(buf[:0], remote, local, true)
	return int(s.reta[s.key.Hash(in)%uint32(len(s.reta))])
}
