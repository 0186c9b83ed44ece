package polarnet

import (
	"reflect"
	"slices"
	"strings"
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// ProtocolCounter is one of gVisor's protocol counters (a counter of its
// tcpip.Stats), summed over the shards, in a type of polarnet's own so that
// exporters need not import gVisor.
type ProtocolCounter struct {
	// Path is the counter's dotted path in tcpip.Stats: "TCP.Retransmits";
	// an embedded struct is named by its type, as in
	// "ICMP.V4.PacketsSent.ICMPv4PacketStats.DstUnreachable".
	Path string
	// Gauge marks counters gVisor also decrements (TCP.CurrentEstablished,
	// TCP.CurrentConnected): a level, not a count. A transient negative
	// level wraps around in Value; read it as an int64.
	Gauge bool
	Value uint64
}

// protocolLeaf locates one counter in tcpip.Stats.
type protocolLeaf struct {
	ProtocolCounter
	index []int // field indices from tcpip.Stats
}

var statCounterType = reflect.TypeFor[*tcpip.StatCounter]()

var protocolLeaves = sync.OnceValue(func() []protocolLeaf {
	var out []protocolLeaf
	var walk func(t reflect.Type, path []string, index []int)
	walk = func(t reflect.Type, path []string, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			p := append(append([]string(nil), path...), f.Name)
			idx := append(append([]int(nil), index...), i)
			switch {
			case f.Type == statCounterType:
				c := ProtocolCounter{Path: strings.Join(p, "."), Gauge: strings.HasPrefix(f.Name, "Current")}
				out = append(out, protocolLeaf{ProtocolCounter: c, index: idx})
			case f.Type.Kind() == reflect.Struct:
				walk(f.Type, p, idx)
			}
		}
	}
	walk(reflect.TypeFor[tcpip.Stats](), nil, nil)
	return out
})

// ProtocolCatalogue returns every counter Stack.ProtocolCounters reports, in
// its order, with Value zero: what exporters describe before they collect.
func ProtocolCatalogue() []ProtocolCounter {
	leaves := protocolLeaves()
	out := make([]ProtocolCounter, len(leaves))
	for i, l := range leaves {
		out[i] = l.ProtocolCounter
	}
	return out
}

// ProtocolCounters returns gVisor's protocol counters summed over the
// shards, in the order of ProtocolCatalogue: a snapshot.
func (s *Stack) ProtocolCounters() []ProtocolCounter {
	out := ProtocolCatalogue()
	for i, v := range s.protocolSums(protocolLeaves()) {
		out[i].Value = v
	}
	return out
}

// ProtocolCounter returns the value of the counter at path (a
// ProtocolCounter.Path) summed over the shards, as ProtocolCounters reports
// it, gauges included; ok is false if path names no counter.
func (s *Stack) ProtocolCounter(path string) (value uint64, ok bool) {
	leaves := protocolLeaves()
	i := slices.IndexFunc(leaves, func(l protocolLeaf) bool { return l.Path == path })
	if i < 0 {
		return 0, false
	}
	return s.protocolSums(leaves[i : i+1])[0], true
}

// protocolSums returns the values of leaves' counters summed over the shards.
func (s *Stack) protocolSums(leaves []protocolLeaf) []uint64 {
	sums := make([]uint64, len(leaves))
	for _, sh := range s.shards {
		st := sh.stack.Stats()
		v := reflect.ValueOf(&st).Elem()
		for i, l := range leaves {
			if c, _ := v.FieldByIndex(l.index).Interface().(*tcpip.StatCounter); c != nil {
				sums[i] += c.Value()
			}
		}
	}
	return sums
}
