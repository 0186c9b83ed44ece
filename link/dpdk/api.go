package dpdk

import (
	"context"

	"github.com/polarnet/polarnet/link"
)

// Link is a DPDK port driven by polarnet: a link.Link with the port's
// status and counters. New returns one that also implements
// link.Steerer when the port spreads flows over its queues with RSS the
// link can predict (a Toeplitz key and a RETA it programmed and read back,
// hashing TCP and UDP over addresses and ports); otherwise the engine
// steers in software.
type Link interface {
	link.Link
	// Setup reports what New settled on.
	Setup() Setup
	// Status returns the port's link status as last polled.
	Status() LinkStatus
	// WaitUp waits until the port's link is up (a net_memif client, for
	// instance, is down until its server accepts it) or ctx is done.
	WaitUp(ctx context.Context) error
	// Stats returns the link's counters.
	Stats() Stats
}

// Setup is what New settled on for a port.
type Setup struct {
	// Port is DPDK's port id; Driver the PMD's name (net_af_packet, mlx5_pci).
	Port   uint16
	Driver string
	// Created reports that the link created the device (a vdev, or a PCI
	// device it probed) and removes it at Close.
	Created bool
	// Queues, RxDescriptors and TxDescriptors are the rings in use, after
	// the PMD's adjustments.
	Queues, RxDescriptors, TxDescriptors int
	// PoolSize is the mempool's mbuf count, MbufDataRoom the frame bytes one
	// mbuf holds, TxStash the mbufs each TX queue allocates ahead.
	PoolSize, MbufDataRoom, TxStash int
	// Wait is WaitInterrupt or WaitSleep: how WaitRead waits on this port.
	Wait WaitMode
	// Doorbell reports that a sleeping queue of this net_memif link is woken
	// by its polarnet peer's doorbell (see README.md), not only by its timer.
	Doorbell bool
	// RxOffloads and TxOffloads are the RTE_ETH_{RX,TX}_OFFLOAD_* flags
	// enabled on the port.
	RxOffloads, TxOffloads uint64
	// RxChecksum says who checks received checksums: "pmd" (offload),
	// "link" (software in the link, accepting the local kernel's
	// checksum-partial frames), "trusted" (SkipChecksums) or "engine".
	RxChecksum string
	// RSS reports the port hashes flows over its queues; RSSHashFunctions
	// are the RTE_ETH_RSS_* types it hashes; Steering that the link
	// implements link.Steerer.
	RSS              bool
	RSSHashFunctions uint64
	Steering         bool
	// Isolated reports rte_flow isolated mode; FlowRules describe the rules
	// the link created.
	Isolated  bool
	FlowRules []string
}

// LinkStatus is a port's link state.
type LinkStatus struct {
	Up         bool
	SpeedMbps  uint32
	FullDuplex bool
	// Changes counts the changes of Up the link has seen since New.
	Changes uint64
}

// Stats are a link's counters.
type Stats struct {
	Queues []QueueStats
	// Port counters from rte_eth_stats: frames the NIC dropped for want of
	// descriptors (RxMissed) or mbufs (RxNoMbuf), and erroneous frames.
	RxMissed, RxErrors, RxNoMbuf, TxErrors uint64
	// PoolInUse is how many mbufs are out of the mempool: in rings, in
	// flight, or allocated ahead by TX queues.
	PoolSize, PoolInUse int
	// LinkChanges counts link status changes.
	LinkChanges uint64
}

// QueueStats are one queue pair's counters.
type QueueStats struct {
	RxFrames, RxBursts uint64
	// RxDropped counts frames received but not handed over: larger than the
	// engine's buffer, or spanning more mbufs than the link expects.
	RxDropped uint64
	// RxPartialChecksum counts frames from the local kernel whose checksum
	// was left partial (CHECKSUM_PARTIAL), accepted as valid.
	RxPartialChecksum  uint64
	TxFrames, TxBursts uint64
	// TxRingFull counts frames the PMD did not accept; TxNoMbuf frames not
	// sent because the mempool was empty.
	TxRingFull, TxNoMbuf uint64
	// Wakeups counts WaitRead returns; Interrupts the wake-ups a receive
	// interrupt or a peer's doorbell caused; Sleeps the timer sleeps of
	// sleep-based waits; Doorbells the times this end rang its sleeping
	// peer.
	Wakeups, Interrupts, Sleeps, Doorbells uint64
}
