package polarnet

import "github.com/polarnet/polarnet/link"

// Stats are a stack's counters: per shard, and summed.
type Stats struct {
	Shards []ShardStats
	Total  ShardStats
	// LinkName is the link's name; Link holds the counters it keeps itself,
	// nil unless it implements link.Statser (see metrics.go).
	LinkName string
	Link     []link.QueueStats
	// Conns is the number of the stack's open TCP conns. KernelDials and
	// KernelAccepts count the conns that the kernel interop policy gave to
	// Go's net instead (see Stack.CountKernelConn) since New: dials, and
	// accepts of the kernel's part of wildcard listens.
	Conns                      int64
	KernelDials, KernelAccepts uint64
}

// ShardStats are one shard's link-level counters.
type ShardStats struct {
	RxFrames, RxBytes uint64
	// RxBadFrame counts frames too short for an Ethernet header or longer
	// than the buffer they were written to.
	RxBadFrame uint64
	// RxOversize counts frames longer than the MTU allows.
	RxOversize uint64
	// RxChecksum counts frames whose transport checksum was wrong.
	RxChecksum uint64
	// RxNoDispatcher counts frames that arrived while the NIC was detached.
	RxNoDispatcher uint64
	// RxMartian counts packets from impossible sources (broadcast,
	// multicast, loopback, reserved, or the stack's own address).
	RxMartian uint64
	// RxShed counts segments without data for no connection (SYNs,
	// segments for a listener or for no endpoint) the shard dropped, all
	// but one per burst, while its link queue held a backlog of mostly
	// such segments: under a flood it cannot keep up with, the established
	// connections' frames go first. What the link dropped for it is
	// QueueStats.RxShed.
	RxShed uint64
	// RxSuperseded counts pure ACKs dropped on arrival because the next
	// segment of their flow in the same burst carried what they said
	// (more acknowledged, or as much with data; a window no smaller).
	RxSuperseded uint64
	// HandoffOut counts frames of flows this shard received for another
	// shard and passed on (software steering); with a link that steers it
	// stays 0. SharedOut counts copies of neighbour replies and router
	// adverts given to every other shard. HandoffIn counts what arrived from
	// other shards (both kinds), HandoffDrop what a full ring lost.
	HandoffOut, SharedOut, HandoffIn, HandoffDrop uint64
	TxFrames, TxBytes                             uint64
	// TxBursts counts WriteBurst calls.
	TxBursts uint64
	// TxRingFull counts frames dropped because the link had no room for
	// them and the backlog kept for the next flush was full.
	TxRingFull uint64
	// TxRetried counts frames the link had no room for at first, kept and
	// sent with a later flush.
	TxRetried uint64
	// TxErrors counts frames the link failed to send.
	TxErrors uint64
	// ACKFiltered counts pure ACKs the ACK filter dropped because a later
	// segment carried them; ACKHeld counts pure ACKs it held back.
	ACKFiltered, ACKHeld uint64
	// PollWakeups counts how often the poller slept and woke.
	PollWakeups uint64
	// PollErrors counts failed ReadBurst calls.
	PollErrors uint64

	// ShardMetrics: gVisor's drops, loss recovery, batching, poll timing.
	ShardMetrics
}

func (c *shardCounters) snapshot() ShardStats {
	return ShardStats{
		RxFrames:       c.rxFrames.Load(),
		RxBytes:        c.rxBytes.Load(),
		RxBadFrame:     c.rxBadFrame.Load(),
		RxOversize:     c.rxOversize.Load(),
		RxChecksum:     c.rxChecksum.Load(),
		RxNoDispatcher: c.rxNoDispatcher.Load(),
		RxMartian:      c.rxMartian.Load(),
		RxShed:         c.rxShed.Load(),
		RxSuperseded:   c.rxSuperseded.Load(),
		HandoffOut:     c.handoffOut.Load(),
		SharedOut:      c.shareOut.Load(),
		HandoffIn:      c.handoffIn.Load(),
		HandoffDrop:    c.handoffDrop.Load(),
		TxFrames:       c.txFrames.Load(),
		TxBytes:        c.txBytes.Load(),
		TxBursts:       c.txBursts.Load(),
		TxRingFull:     c.txRingFull.Load(),
		TxRetried:      c.txRetried.Load(),
		TxErrors:       c.txErrors.Load(),
		ACKFiltered:    c.ackFiltered.Load(),
		ACKHeld:        c.ackHeld.Load(),
		PollWakeups:    c.pollWakeups.Load(),
		PollErrors:     c.pollErrors.Load(),
	}
}

func (a *ShardStats) add(b ShardStats) {
	a.RxFrames += b.RxFrames
	a.RxBytes += b.RxBytes
	a.RxBadFrame += b.RxBadFrame
	a.RxOversize += b.RxOversize
	a.RxChecksum += b.RxChecksum
	a.RxNoDispatcher += b.RxNoDispatcher
	a.RxMartian += b.RxMartian
	a.RxShed += b.RxShed
	a.RxSuperseded += b.RxSuperseded
	a.HandoffOut += b.HandoffOut
	a.SharedOut += b.SharedOut
	a.HandoffIn += b.HandoffIn
	a.HandoffDrop += b.HandoffDrop
	a.TxFrames += b.TxFrames
	a.TxBytes += b.TxBytes
	a.TxBursts += b.TxBursts
	a.TxRingFull += b.TxRingFull
	a.TxRetried += b.TxRetried
	a.TxErrors += b.TxErrors
	a.ACKFiltered += b.ACKFiltered
	a.ACKHeld += b.ACKHeld
	a.PollWakeups += b.PollWakeups
	a.PollErrors += b.PollErrors
	a.ShardMetrics.add(&b.ShardMetrics)
}

// Stats returns the stack's counters.
func (s *Stack) Stats() Stats {
	var st Stats
	for _, sh := range s.shards {
		ss := sh.stats.snapshot()
		st.Shards = append(st.Shards, ss)
		st.Total.add(ss)
	}
	s.addMetrics(&st)
	st.Conns = s.conns.Load()
	st.KernelDials, st.KernelAccepts = s.kernelDials.Load(), s.kernelAccepts.Load()
	return st
}
