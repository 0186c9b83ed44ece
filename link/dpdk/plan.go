package dpdk

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/polarnet/polarnet/link"
)

// DPDK's flags, as rte_ethdev.h defines them (checked against the headers
// in the cgo build's tests).
const (
	rxOffloadIPv4Cksum = 1 << 1
	rxOffloadUDPCksum  = 1 << 2
	rxOffloadTCPCksum  = 1 << 3
	rxOffloadScatter   = 1 << 13

	txOffloadIPv4Cksum = 1 << 1
	txOffloadUDPCksum  = 1 << 2
	txOffloadTCPCksum  = 1 << 3
	txOffloadTCPTSO    = 1 << 5
	txOffloadMultiSegs = 1 << 15

	rssIPv4        = 1 << 2
	rssFragIPv4    = 1 << 3
	rssIPv4TCP     = 1 << 4
	rssIPv4UDP     = 1 << 5
	rssIPv4Other   = 1 << 7
	rssIPv6        = 1 << 8
	rssFragIPv6    = 1 << 9
	rssIPv6TCP     = 1 << 10
	rssIPv6UDP     = 1 << 11
	rssIPv6Other   = 1 << 13
	rssWanted      = rssIPv4 | rssFragIPv4 | rssIPv4TCP | rssIPv4UDP | rssIPv4Other | rssIPv6 | rssFragIPv6 | rssIPv6TCP | rssIPv6UDP | rssIPv6Other
	rssL4FourTuple = rssIPv4TCP | rssIPv4UDP | rssIPv6TCP | rssIPv6UDP
)

// gsoMaxSize is the largest TCP frame handed to a PMD with TSO: an IPv4
// packet's length field bounds it.
const gsoMaxSize = 65535

// portInfo is what the PMD reports about a port (rte_eth_dev_info and
// friends), in Go terms.
type portInfo struct {
	driver                       string
	name                         string
	maxRxQueues, maxTxQueues     int
	maxRxPktLen                  int
	minMTU, maxMTU, mtu          int
	rxOffloadCapa, txOffloadCapa uint64
	rssOffloads                  uint64
	retaSize, hashKeySize        int
	mac                          net.HardwareAddr
	// afFrameSlot is a net_af_packet port's ring slot size (its framesz
	// argument) when the link created the port and knows it, else 0.
	afFrameSlot int
}

// rxChecksum says who checks the checksums of received frames.
type rxChecksum uint8

const (
	rxChecksumEngine  rxChecksum = iota // nobody here: the engine does
	rxChecksumPMD                       // the PMD's offload flags
	rxChecksumLink                      // software in the link, partial frames accepted
	rxChecksumTrusted                   // SkipChecksums
)

func (c rxChecksum) String() string {
	return [...]string{"engine", "pmd", "link", "trusted"}[c]
}

// localKernelDrivers are PMDs on a kernel interface of this host: a frame
// they receive from the local kernel may carry a checksum-partial
// (CHECKSUM_PARTIAL) TCP or UDP checksum that the PMD does not flag, such as
// a veth peer's with its TX checksum offload on.
var localKernelDrivers = []string{"net_af_packet", "net_af_xdp", "net_pcap"}

// unlimitedMTUDrivers carry frames of any length as mbuf chains and enforce
// no MTU of their own (they have no mtu_set and report 1518-byte frames).
var unlimitedMTUDrivers = []string{"net_memif"}

// portPlan is how a port is set up: everything New decides from the
// Config and the port's capabilities before touching the port.
type portPlan struct {
	mtu        int
	setMTU     bool // ask the PMD to set mtu
	frameSize  int  // link.Info.RxFrameSize
	dataRoom   int
	txStash    int
	maxTxSegs  int // mbufs of the largest frame sent
	maxRxSegs  int // mbufs of the largest frame received
	rxOffloads uint64
	txOffloads uint64
	rxChecksum rxChecksum
	txChecksum bool // set checksum offload flags on sent frames
	tso        bool
	caps       link.Capabilities
	gsoMaxSize int
	rss        bool
	rssHF      uint64
	rssKey     []byte
	steer      bool // RETA to program; implement Steerer if it reads back
	rules      []flowRule
	// setIfaceMTU: the port is a net_af_packet port whose MTU is beyond
	// what ethdev lets through (it checks MTUs against the PMD's 1518-byte
	// max_rx_pktlen, though the PMD takes frames as large as its ring
	// slots): the link sets the kernel interface's MTU itself.
	setIfaceMTU bool
}

// plan decides the port's setup. c has its defaults applied.
func plan(c *Config, info *portInfo) (*portPlan, error) {
	p := &portPlan{mtu: c.MTU}
	if c.Queues > info.maxRxQueues || c.Queues > info.maxTxQueues {
		hint := ""
		if info.driver == "net_af_packet" {
			hint = " (net_af_packet: create it with qpairs=N)"
		}
		return nil, fmt.Errorf("%w: %s (%s) has %d RX and %d TX queues, Config.Queues is %d%s",
			ErrTooFewQueues, info.name, info.driver, info.maxRxQueues, info.maxTxQueues, c.Queues, hint)
	}
	unlimited := slices.Contains(unlimitedMTUDrivers, info.driver)
	// ethdev refuses an MTU whose frame exceeds max_rx_pktlen even when
	// the PMD leaves max_mtu at its default (65535).
	maxMTU := info.maxMTU
	if info.maxRxPktLen > ethOverhead && (maxMTU == 0 || maxMTU > info.maxRxPktLen-ethOverhead) {
		maxMTU = info.maxRxPktLen - ethOverhead
	}
	afSlot := info.driver == "net_af_packet" && info.afFrameSlot > 0
	switch {
	case p.mtu == 0:
		p.mtu = info.mtu
	case p.mtu == info.mtu:
	case unlimited:
		// The PMD neither sets nor enforces an MTU.
	case afSlot && p.mtu >= info.minMTU && p.mtu > maxMTU:
		// net_af_packet receives frames as large as its ring slots: the
		// kernel interface's MTU is the limit, set by the link.
		if limit := afPacketMaxMTU(info.afFrameSlot); p.mtu > limit {
			return nil, fmt.Errorf("dpdk: MTU %d does not fit %s's ring slots of %d bytes (MTU %d at most): create it with framesz=%d, or leave framesz out and the link chooses",
				p.mtu, info.name, info.afFrameSlot, limit, afPacketSlotFor(p.mtu))
		}
		p.setIfaceMTU = true
	case maxMTU > 0 && (p.mtu > maxMTU || p.mtu < info.minMTU):
		hint := ""
		if info.driver == "net_af_packet" {
			hint = " (net_af_packet takes larger MTUs when the link creates it: give Config.Device as a vdev spec)"
		}
		return nil, fmt.Errorf("dpdk: MTU %d outside %s's range %d..%d%s", p.mtu, info.name, info.minMTU, maxMTU, hint)
	default:
		p.setMTU = true
	}
	p.frameSize = p.mtu + ethOverhead
	p.dataRoom = c.dataRoom(p.frameSize)
	if afSlot {
		// The PMD copies each frame into one mbuf and refuses, at RX queue
		// setup, mbufs smaller than a ring slot's data.
		need := (info.afFrameSlot - afPacketTxHeader + 63) &^ 63
		switch {
		case c.MbufDataRoom == 0:
			p.dataRoom = max(p.dataRoom, need)
		case c.MbufDataRoom < info.afFrameSlot-afPacketTxHeader:
			return nil, fmt.Errorf("dpdk: Config.MbufDataRoom %d is smaller than %s's ring slots of %d bytes (less their %d-byte header), which the PMD copies into one mbuf: raise it to %d or leave it out",
				c.MbufDataRoom, info.name, info.afFrameSlot, afPacketTxHeader, need)
		}
	}

	// Frames larger than one mbuf travel as chains: the PMD must accept
	// them for sending and build them when receiving.
	chained := p.frameSize > p.dataRoom
	multiSegs := info.txOffloadCapa&txOffloadMultiSegs != 0
	if chained {
		switch {
		case unlimited:
			// memif chains on receive without announcing scatter.
		case info.rxOffloadCapa&rxOffloadScatter != 0:
			p.rxOffloads |= rxOffloadScatter
		default:
			return nil, fmt.Errorf("dpdk: frames of %d bytes do not fit mbufs of %d and %s cannot receive mbuf chains (scatter): raise Config.MbufDataRoom", p.frameSize, p.dataRoom, info.driver)
		}
		if !multiSegs {
			return nil, fmt.Errorf("dpdk: frames of %d bytes do not fit mbufs of %d and %s cannot send mbuf chains: raise Config.MbufDataRoom", p.frameSize, p.dataRoom, info.driver)
		}
	}
	if multiSegs {
		// Harmless when every frame fits one mbuf; needed for chains.
		p.txOffloads |= txOffloadMultiSegs
	}

	switch {
	case c.SkipChecksums:
		p.rxChecksum = rxChecksumTrusted
		p.caps |= link.CapRXChecksum | link.CapTXChecksum
	case !c.DisableOffloads && info.rxOffloadCapa&(rxOffloadTCPCksum|rxOffloadUDPCksum) == rxOffloadTCPCksum|rxOffloadUDPCksum:
		p.rxOffloads |= rxOffloadTCPCksum | rxOffloadUDPCksum | info.rxOffloadCapa&rxOffloadIPv4Cksum
		p.rxChecksum = rxChecksumPMD
		p.caps |= link.CapRXChecksum
	case slices.Contains(localKernelDrivers, info.driver):
		p.rxChecksum = rxChecksumLink
		p.caps |= link.CapRXChecksum
	}
	const txCsum = txOffloadTCPCksum | txOffloadUDPCksum
	if !c.SkipChecksums && !c.DisableOffloads && info.txOffloadCapa&txCsum == txCsum {
		p.txOffloads |= txCsum
		p.txChecksum = true
		p.caps |= link.CapTXChecksum
		// TSO also needs the IPv4 header checksum of every segment redone,
		// and chains: a 64 KiB frame spans many mbufs.
		const tsoNeeds = txOffloadTCPTSO | txOffloadIPv4Cksum | txOffloadMultiSegs
		if info.txOffloadCapa&tsoNeeds == tsoNeeds {
			p.txOffloads |= tsoNeeds
			p.tso = true
			p.caps |= link.CapGSO
			p.gsoMaxSize = gsoMaxSize
		}
	}
	largestTx := p.frameSize
	if p.tso {
		largestTx = max(largestTx, p.gsoMaxSize)
	}
	p.maxTxSegs = (largestTx + p.dataRoom - 1) / p.dataRoom
	p.maxRxSegs = (p.frameSize+p.dataRoom-1)/p.dataRoom + 1
	p.txStash = txStash(c.PoolSize, c.Queues, p.maxTxSegs)
	if p.txStash < p.maxTxSegs {
		return nil, fmt.Errorf("dpdk: a pool of %d mbufs leaves each TX queue %d, and the largest frame takes %d: raise Config.PoolSize", c.PoolSize, p.txStash, p.maxTxSegs)
	}

	if c.Queues > 1 && info.rssOffloads != 0 {
		p.rss = true
		p.rssHF = rssWanted & info.rssOffloads
		p.rssKey = c.rssKey(info.hashKeySize)
		// The link can predict the queue only from a RETA it programs and a
		// hash over addresses and ports of TCP and UDP alike.
		p.steer = !c.Isolate && info.retaSize > 0 && p.rssHF&rssL4FourTuple == rssL4FourTuple
	}
	if c.Isolate {
		p.rss = false // the rules' RSS action spreads flows instead
		mac := c.MAC
		if mac == nil {
			mac = info.mac
		}
		p.rules = isolateRules(mac, c.IsolateAddrs, c.Queues)
		if c.Queues > 1 {
			p.rssHF = rssWanted & info.rssOffloads
			p.rssKey = c.rssKey(info.hashKeySize)
		}
	}
	return p, nil
}

// memifDefaultBuffer is net_memif's default descriptor buffer (bsize).
const memifDefaultBuffer = 2048

// memifRingBytes bounds the shared memory of one memif ring the link asks
// for when it chooses the ring size, memifMinLog2Ring is the fewest slots
// (log2) it chooses: every frame takes a slot, a 64-byte ACK as much as a
// 64 KiB segment.
const (
	memifRingBytes   = 64 << 20
	memifMinLog2Ring = 10
)

// memifArgs returns the arguments of a net_memif device for a link of MTU
// mtu (0: 1500), adding what args leave out:
//   - bsize, the descriptor buffer: DPDK 22.11's memif sender leaves a
//     stale "next" flag on the first descriptor of a frame when that
//     descriptor last carried the middle of a frame spanning several, so
//     the receiver glues unrelated frames together. The link avoids frames
//     spanning descriptors with buffers that hold a whole frame. memif's
//     bsize is 16 bits: frames of more than 65535 bytes are an error.
//   - rsize, log2 of the ring's slots: as many as fit memifRingBytes (16384
//     for 2 KiB buffers, memif's most), at least 1024, since a full ring
//     drops frames and a TCP window of a few MiB outruns memif's default
//     1024 slots at 1500 bytes.
func memifArgs(args string, mtu int) (string, error) {
	if mtu == 0 {
		mtu = 1500
	}
	frame := mtu + ethOverhead
	if frame > 0xffff {
		return "", fmt.Errorf("dpdk: net_memif carries frames of at most 65535 bytes in one buffer; MTU %d needs %d (at most %d)", mtu, frame, 0xffff-ethOverhead)
	}
	bsize, haveRsize := 0, false
	for _, kv := range strings.Split(args, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		switch k {
		case "bsize":
			n, err := strconv.Atoi(v)
			if err != nil {
				return "", fmt.Errorf("dpdk: net_memif bsize=%q: %w", v, err)
			}
			bsize = n
		case "rsize":
			haveRsize = true
		}
	}
	var add []string
	switch {
	case bsize != 0 && bsize < frame:
		return "", fmt.Errorf("dpdk: net_memif bsize=%d cannot hold frames of %d bytes (MTU %d): DPDK 22.11's memif corrupts frames spanning buffers; raise bsize or leave it out", bsize, frame, mtu)
	case bsize == 0 && frame > memifDefaultBuffer:
		bsize = min((frame+1023)&^1023, 0xffff)
		add = append(add, fmt.Sprintf("bsize=%d", bsize))
	case bsize == 0:
		bsize = memifDefaultBuffer
	}
	if !haveRsize {
		log2 := 14 // memif's largest ring
		for log2 > memifMinLog2Ring && bsize<<log2 > memifRingBytes {
			log2--
		}
		add = append(add, fmt.Sprintf("rsize=%d", log2))
	}
	if args != "" {
		add = append([]string{args}, add...)
	}
	return strings.Join(add, ","), nil
}

// net_af_packet's ring slots (TPACKET_V2): a received frame starts
// afPacketRxHeader bytes into its slot (the 52-byte header and sockaddr,
// aligned so that the IP header is: TPACKET_ALIGN(52 + 16) - 14), a sent
// one afPacketTxHeader bytes in. The PMD's default slot is 2048 bytes.
const (
	afPacketRxHeader = 66
	afPacketTxHeader = 32
	afPacketSlot     = 2048
	afPacketMaxSlot  = 1 << 17
	afPacketPageSize = 4096
)

// afPacketMaxMTU is the largest MTU whose frames (with a VLAN tag) fit a
// ring slot of slot bytes.
func afPacketMaxMTU(slot int) int { return slot - afPacketRxHeader - ethOverhead }

// afPacketSlotFor is the ring slot the link chooses for MTU mtu: the
// default 2048 bytes while they hold a frame, else whole pages. Slots must
// tile the kernel's blocks with no gap, since the PMD addresses slot i at
// i × framesz: a block of one slot (blocksz = framesz) always does.
func afPacketSlotFor(mtu int) int {
	need := mtu + ethOverhead + afPacketRxHeader
	if need <= afPacketSlot {
		return afPacketSlot
	}
	return (need + afPacketPageSize - 1) / afPacketPageSize * afPacketPageSize
}

// afPacketArgs returns the arguments of a net_af_packet device for a link
// of MTU mtu (0: 1500) and the ring slot size they give: when args name
// no framesz and MTU's frames do not fit the PMD's default 2 KiB slots,
// framesz (and blocksz, one slot a block, unless given) are added.
func afPacketArgs(args string, mtu int) (string, int, error) {
	if mtu == 0 {
		mtu = 1500
	}
	slot, block := 0, 0
	for _, kv := range strings.Split(args, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		switch k {
		case "framesz", "blocksz":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return "", 0, fmt.Errorf("dpdk: net_af_packet %s=%q: not a size", k, v)
			}
			if k == "framesz" {
				slot = n
			} else {
				block = n
			}
		}
	}
	if slot != 0 {
		return args, slot, nil
	}
	slot = afPacketSlotFor(mtu)
	if slot == afPacketSlot {
		return args, slot, nil
	}
	if slot > afPacketMaxSlot {
		return "", 0, fmt.Errorf("dpdk: MTU %d needs net_af_packet ring slots of %d bytes, more than the %d the link chooses; give framesz and blocksz", mtu, slot, afPacketMaxSlot)
	}
	add := []string{fmt.Sprintf("framesz=%d", slot)}
	if block == 0 {
		add = append(add, fmt.Sprintf("blocksz=%d", slot))
	} else if block%slot != 0 {
		return "", 0, fmt.Errorf("dpdk: net_af_packet blocksz=%d is no multiple of the %d-byte slots MTU %d needs; leave blocksz out or give framesz too", block, slot, mtu)
	}
	if args != "" {
		add = append([]string{args}, add...)
	}
	return strings.Join(add, ","), slot, nil
}

// vdevArg returns the value of key in a vdev's arguments, or "".
func vdevArg(args, key string) string {
	for _, kv := range strings.Split(args, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && k == key {
			return v
		}
	}
	return ""
}
