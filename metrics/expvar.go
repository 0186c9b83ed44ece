package metrics

import (
	"expvar"
	"fmt"

	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/polarnet"
)

// ExpvarSnapshot is what PublishExpvar publishes: the stack's Stats, each
// shard with its busy ratio, and gVisor's counters summed over shards.
type ExpvarSnapshot struct {
	Link string `json:"link"`
	// Conns, KernelDials and KernelAccepts are Stats' conns by path.
	Conns         int64             `json:"conns"`
	KernelDials   uint64            `json:"kernel_dials"`
	KernelAccepts uint64            `json:"kernel_accepts"`
	Shards        []ExpvarShard     `json:"shards"`
	Total         ExpvarShard       `json:"total"`
	LinkQueues    []link.QueueStats `json:"link_queues,omitempty"`
	// TCPIP maps gVisor counter paths ("TCP.Retransmits") to their sums.
	TCPIP map[string]uint64 `json:"tcpip"`
}

// ExpvarShard is a shard's counters with its busy ratio.
type ExpvarShard struct {
	polarnet.ShardStats
	BusyRatio float64 `json:"BusyRatio"`
}

// Snapshot returns the stack's counters in the form PublishExpvar publishes.
func Snapshot(st *polarnet.Stack) ExpvarSnapshot {
	stats := st.Stats()
	out := ExpvarSnapshot{
		Link:          stats.LinkName,
		Conns:         stats.Conns,
		KernelDials:   stats.KernelDials,
		KernelAccepts: stats.KernelAccepts,
		Total:         ExpvarShard{stats.Total, stats.Total.BusyRatio()},
		LinkQueues:    stats.Link,
		TCPIP:         ProtocolValues(st.ProtocolCounters()),
	}
	for _, s := range stats.Shards {
		out.Shards = append(out.Shards, ExpvarShard{s, s.BusyRatio()})
	}
	return out
}

// PublishExpvar publishes the stack's counters as the expvar variable name
// (served as JSON at /debug/vars by expvar's handler), computed afresh at
// every read. Expvar names are global and permanent: publishing a name
// twice is an error, and the variable keeps the stack reachable.
func PublishExpvar(name string, st *polarnet.Stack) error {
	if expvar.Get(name) != nil {
		return fmt.Errorf("metrics: expvar %q is already published", name)
	}
	expvar.Publish(name, expvar.Func(func() any { return Snapshot(st) }))
	return nil
}
