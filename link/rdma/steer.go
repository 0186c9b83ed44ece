package rdma

import (
	"net/netip"

	"github.com/polarnet/polarnet/internal/toeplitz"
)

// rssSpread predicts where the device's RSS puts a received flow: the
// hashing QP of the flow's class computes the Toeplitz hash of the frame's
// source and destination addresses and ports (source first: for a received
// frame the source is the remote end), and its low bits pick the
// indirection table entry, which names a receive work queue.
type rssSpread struct {
	key   *toeplitz.Key
	table []int
}

func newRSSSpread(r *rssPlan) (*rssSpread, error) {
	k, err := toeplitz.NewKey(r.key)
	if err != nil {
		return nil, err
	}
	return &rssSpread{key: k, table: r.table}, nil
}

// queue returns the queue a frame from src to dst lands on (TCP and UDP
// alike: both hashing classes cover addresses and ports).
func (s *rssSpread) queue(src, dst netip.AddrPort) int {
	var buf [toeplitz.MaxInput]byte
	h := s.key.Hash(toeplitz.Tuple(buf[:0], src, dst, true))
	return s.table[h%uint32(len(s.table))]
}

// RxQueue implements link.Steerer: the queue on which TCP frames from
// remote to local arrive, or -1 when the link does not spread flows (one
// queue, or no RSS: queue 0 then receives everything and the engine steers
// in software).
func (l *Link) RxQueue(local, remote netip.AddrPort) int {
	if l.spread == nil || local.Addr().Unmap().Is4() != remote.Addr().Unmap().Is4() {
		return -1
	}
	return l.spread.queue(remote, local)
}
