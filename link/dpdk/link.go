//go:build dpdk && linux && cgo

package dpdk

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/link"
)

// ctl serialises the control path (creating, configuring and removing
// ports): DPDK's device and bus code is not made for concurrent callers.
var ctl sync.Mutex

// poolIDs names mempools, which need unique names.
var poolIDs atomic.Uint64

// port is a DPDK port as a polarnet link.
type port struct {
	cfg   Config
	plan  *portPlan
	id    C.uint16_t
	info  link.Info
	setup Setup

	removeVdev string // vdev to remove at Close ("" if none)
	vdevArgs   string // its arguments, as created
	// afFrameSlot is a net_af_packet vdev's ring slot size (framesz).
	afFrameSlot int
	bells       *bellSetup
	removeDev   bool // probed device to remove at Close
	pool        *C.struct_rte_mempool
	queues      []*queue
	pqueues     []link.Queue
	started     bool

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	statusMu    sync.Mutex
	status      LinkStatus
	statusKnown bool // status was read once
	monitorStop chan struct{}
	monitorDone chan struct{}

	steer *rssSteerer // set when Setup().Steering
}

// bellSetup is a net_memif link's doorbell file and paths.
type bellSetup struct {
	file  *bellFile
	paths memifBellPaths
}

// rssPort is a port whose RSS spreading the link predicts.
type rssPort struct {
	*port
	steer *rssSteerer
}

var (
	_ Link         = (*port)(nil)
	_ Link         = (*rssPort)(nil)
	_ link.Steerer = (*rssPort)(nil)
)

// RxQueue implements link.Steerer with the port's Toeplitz key and RETA.
func (l *rssPort) RxQueue(local, remote netip.AddrPort) int { return l.steer.RxQueue(local, remote) }

// New opens the port cfg.Device names (creating it if it is a virtual
// device), initialising EAL first if nothing has, and sets it up with one
// RX/TX queue pair per shard. See Config for what can be set and README.md
// for the setup of hosts and of each virtual device.
//
// The Link it returns implements link.Steerer when the port's RSS is
// predictable (see Link). It is owned by the polarnet.Stack it is given to.
func New(cfg Config) (Link, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := InitEAL(cfg.EAL); err != nil {
		return nil, err
	}
	l, err := openPort(cfg)
	if err != nil {
		return nil, err
	}
	var out Link = l
	if l.setup.Steering {
		out = &rssPort{port: l, steer: l.steer}
	}
	if cfg.WaitUp > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.WaitUp)
		defer cancel()
		if err := l.WaitUp(ctx); err != nil {
			hint := ""
			if l.setup.Driver == "net_memif" {
				hint = " (a net_memif client is down until a server listens on its socket)"
			}
			return nil, errors.Join(fmt.Errorf("dpdk: %s is not up after Config.WaitUp %v%s: %w", l.info.Name, cfg.WaitUp, hint, err), l.Close())
		}
	}
	return out, nil
}

// openPort opens the port under ctl and starts its status monitor.
func openPort(cfg Config) (*port, error) {
	ctl.Lock()
	defer ctl.Unlock()
	l := &port{cfg: cfg}
	if err := l.open(); err != nil {
		l.teardown()
		return nil, err
	}
	l.monitorStop, l.monitorDone = make(chan struct{}), make(chan struct{})
	go l.monitor()
	if l.plan.steer {
		if s := l.steering(); s != nil {
			l.setup.Steering, l.steer = true, s
		}
	}
	return l, nil
}

// open finds or creates the port and sets it up. On error, teardown undoes
// what it did.
func (l *port) open() error {
	if err := l.find(); err != nil {
		return err
	}
	var ci C.struct_pn_info
	if ret := C.pn_port_info(l.id, &ci); ret != 0 {
		return rteError(fmt.Sprintf("dpdk: reading the capabilities of %s", l.cfg.Device), ret)
	}
	info := goPortInfo(&ci)
	info.afFrameSlot = l.afFrameSlot
	p, err := plan(&l.cfg, info)
	if err != nil {
		return err
	}
	l.plan = p
	l.setup.Port, l.setup.Driver = uint16(l.id), info.driver
	l.setup.Created = l.removeVdev != "" || l.removeDev
	name := fmt.Sprintf("%s (%s)", info.name, info.driver)

	if len(p.rules) > 0 {
		if err := l.isolate(name); err != nil {
			return err
		}
	}
	mac := info.mac
	if l.cfg.MAC != nil && !slices.Equal(l.cfg.MAC, info.mac) {
		cmac := (*C.uint8_t)(C.CBytes(l.cfg.MAC))
		ret := C.pn_set_mac(l.id, cmac)
		C.free(unsafe.Pointer(cmac))
		if ret != 0 {
			return rteError(fmt.Sprintf("dpdk: setting MAC %v on %s", l.cfg.MAC, name), ret)
		}
		mac = l.cfg.MAC
	}
	if err := l.createPool(name, info); err != nil {
		return err
	}
	wantIntr := l.cfg.Wait != WaitSleep
	conf := C.struct_pn_conf{
		nb_queues:   C.uint16_t(l.cfg.Queues),
		nb_rxd:      C.uint16_t(l.cfg.RxDescriptors),
		nb_txd:      C.uint16_t(l.cfg.TxDescriptors),
		rx_offloads: C.uint64_t(p.rxOffloads),
		tx_offloads: C.uint64_t(p.txOffloads),
		rss_hf:      C.uint64_t(p.rssHF),
	}
	if p.rss {
		conf.rss = 1
		conf.rss_key_len = C.uint8_t(len(p.rssKey))
		for i, b := range p.rssKey {
			conf.rss_key[i] = C.uint8_t(b)
		}
	}
	if wantIntr {
		conf.rxq_intr = 1
	}
	ret := C.pn_port_configure(l.id, &conf)
	if ret != 0 && wantIntr && l.cfg.Wait == WaitAuto {
		// A PMD without receive interrupts may refuse to be asked for them.
		conf.rxq_intr, wantIntr = 0, false
		ret = C.pn_port_configure(l.id, &conf)
	}
	if ret != 0 {
		return rteError(fmt.Sprintf("dpdk: configuring %s with %d queue pairs", name, l.cfg.Queues), ret)
	}
	l.setup.Queues = l.cfg.Queues
	l.setup.RxDescriptors, l.setup.TxDescriptors = int(conf.nb_rxd), int(conf.nb_txd)
	if p.setMTU {
		if ret := C.pn_set_mtu(l.id, C.uint16_t(p.mtu)); ret != 0 {
			return rteError(fmt.Sprintf("dpdk: setting MTU %d on %s", p.mtu, name), ret)
		}
	}
	if p.setIfaceMTU {
		iface := vdevArg(l.vdevArgs, "iface")
		if err := setInterfaceMTU(iface, p.mtu); err != nil {
			return fmt.Errorf("dpdk: setting MTU %d on %s's interface %s: %w", p.mtu, name, iface, err)
		}
	}
	for q := range l.cfg.Queues {
		if ret := C.pn_rxq_setup(l.id, C.uint16_t(q), conf.nb_rxd, C.uint64_t(p.rxOffloads), l.pool); ret != 0 {
			return rteError(fmt.Sprintf("dpdk: setting up RX queue %d of %s", q, name), ret)
		}
		if ret := C.pn_txq_setup(l.id, C.uint16_t(q), conf.nb_txd, C.uint64_t(p.txOffloads)); ret != 0 {
			return rteError(fmt.Sprintf("dpdk: setting up TX queue %d of %s", q, name), ret)
		}
	}
	if ret := C.pn_port_start(l.id); ret != 0 {
		err := rteError(fmt.Sprintf("dpdk: starting %s", name), ret)
		if info.driver == "net_memif" && memifBells(l.vdevArgs).role == "client" {
			err = fmt.Errorf("%w: a net_memif client connects when it starts, so its server (role=server, the same socket) must be running first", err)
		}
		return err
	}
	l.started = true
	if l.cfg.Promiscuous {
		if ret := C.pn_promiscuous(l.id); ret != 0 {
			return rteError(fmt.Sprintf("dpdk: promiscuous mode on %s", name), ret)
		}
	}
	// IPv6 neighbour discovery needs the solicited-node groups; PMDs that
	// cannot filter multicast receive it anyway.
	C.pn_allmulticast(l.id)
	if len(p.rules) > 0 {
		if err := l.createRules(name); err != nil {
			return err
		}
	}
	l.setup.Wait = WaitSleep
	if info.driver == "net_memif" && l.removeVdev != "" && l.cfg.Wait != WaitInterrupt {
		// memif has no receive interrupts: doorbells between polarnet ends.
		paths := memifBells(l.vdevArgs)
		f, err := openBellFile(paths.shm)
		if err != nil {
			return fmt.Errorf("dpdk: %s: doorbell file: %w", name, err)
		}
		l.bells = &bellSetup{file: f, paths: paths}
		l.setup.Doorbell = true
	}
	for q := range l.cfg.Queues {
		qu, err := newQueue(l, q, wantIntr)
		if err != nil {
			return err
		}
		l.queues = append(l.queues, qu)
		l.pqueues = append(l.pqueues, qu)
	}
	if wantIntr && l.queues[0].wait.intrFd >= 0 {
		l.setup.Wait = WaitInterrupt
	} else if l.cfg.Wait == WaitInterrupt {
		return unsupported{fmt.Errorf("dpdk: %s has no receive interrupts (Config.Wait is WaitInterrupt; WaitAuto sleeps instead)", name)}
	}

	l.info = link.Info{
		Name:        info.name,
		MAC:         slices.Clone(mac),
		MTU:         p.mtu,
		RxFrameSize: p.frameSize,
		Caps:        p.caps,
		GSOMaxSize:  p.gsoMaxSize,
	}
	l.setup.PoolSize, l.setup.MbufDataRoom, l.setup.TxStash = l.cfg.PoolSize, p.dataRoom, p.txStash
	l.setup.RxOffloads, l.setup.TxOffloads = p.rxOffloads, p.txOffloads
	l.setup.RxChecksum = p.rxChecksum.String()
	l.setup.RSS, l.setup.RSSHashFunctions = p.rss, p.rssHF
	l.pollStatus()
	return nil
}

// find looks the port up, creating a virtual device or probing a PCI
// device first when it does not exist yet.
func (l *port) find() error {
	name, args := splitDevice(l.cfg.Device)
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var id C.uint16_t
	if C.pn_port_by_name(cname, &id) == 0 {
		l.id = id
		return nil
	}
	if isVdev(name) {
		switch {
		case strings.HasPrefix(name, "net_memif"):
			var err error
			if args, err = memifArgs(args, l.cfg.MTU); err != nil {
				return err
			}
		case strings.HasPrefix(name, "net_af_packet"):
			var err error
			if args, l.afFrameSlot, err = afPacketArgs(args, l.cfg.MTU); err != nil {
				return err
			}
		}
		l.vdevArgs = args
		cargs := C.CString(args)
		ret := C.pn_vdev_create(cname, cargs)
		C.free(unsafe.Pointer(cargs))
		if ret != 0 {
			return fmt.Errorf("%w: %w", ErrPortNotFound, rteError(fmt.Sprintf("dpdk: creating virtual device %s with %q (no such driver, a bad argument, or a missing interface or socket: EAL's message on stderr says which)", name, args), ret))
		}
		l.removeVdev = name
	} else if pciBus() {
		cdev := C.CString(l.cfg.Device)
		ret := C.pn_dev_probe(cdev)
		C.free(unsafe.Pointer(cdev))
		if ret == 0 {
			l.removeDev = true
		}
	}
	if C.pn_port_by_name(cname, &id) != 0 {
		var buf [1024]C.char
		C.pn_port_list(&buf[0], C.size_t(len(buf)))
		ports := C.GoString(&buf[0])
		if ports == "" {
			ports = "none"
		}
		hint := ""
		if !isVdev(name) {
			hint = "; a NIC must be bound to vfio-pci and listed in EALConfig.Allow (EAL runs with --no-pci otherwise), see README.md"
		}
		return fmt.Errorf("%w: %s (ports: %s)%s", ErrPortNotFound, name, ports, hint)
	}
	l.id = id
	return nil
}

func goPortInfo(ci *C.struct_pn_info) *portInfo {
	mac := make(net.HardwareAddr, 6)
	for i := range mac {
		mac[i] = byte(ci.mac[i])
	}
	return &portInfo{
		driver:        C.GoString(&ci.driver[0]),
		name:          C.GoString(&ci.name[0]),
		maxRxQueues:   int(ci.max_rx_queues),
		maxTxQueues:   int(ci.max_tx_queues),
		maxRxPktLen:   int(ci.max_rx_pktlen),
		minMTU:        int(ci.min_mtu),
		maxMTU:        int(ci.max_mtu),
		mtu:           int(ci.mtu),
		rxOffloadCapa: uint64(ci.rx_offload_capa),
		txOffloadCapa: uint64(ci.tx_offload_capa),
		rssOffloads:   uint64(ci.flow_type_rss_offloads),
		retaSize:      int(ci.reta_size),
		hashKeySize:   int(ci.hash_key_size),
		mac:           mac,
	}
}

func (l *port) createPool(name string, info *portInfo) error {
	pname := C.CString(fmt.Sprintf("pn_pool%d", poolIDs.Add(1)))
	defer C.free(unsafe.Pointer(pname))
	var errno C.int
	l.pool = C.pn_pool_create(pname, C.unsigned(l.cfg.PoolSize), C.unsigned(l.plan.dataRoom), -1, &errno)
	if l.pool == nil {
		err := rteError(fmt.Sprintf("dpdk: creating a mempool of %d mbufs of %d bytes for %s", l.cfg.PoolSize, l.plan.dataRoom, name), -errno)
		if errno == C.int(syscall.ENOMEM) {
			err = fmt.Errorf("%w (EAL is out of memory: raise EALConfig.MemoryMB or reserve more hugepages, or lower Config.PoolSize)", err)
		}
		return err
	}
	return nil
}

// isolate enters rte_flow isolated mode.
func (l *port) isolate(name string) error {
	var msg [256]C.char
	if ret := C.pn_flow_isolate(l.id, 1, &msg[0], C.size_t(len(msg))); ret != 0 {
		err := fmt.Errorf("dpdk: isolated mode on %s: %w%s; isolation needs a PMD with rte_flow isolation, such as mlx5 (bifurcated)",
			name, errnoError(ret), flowReason(ret, &msg[0]))
		if ret == -C.int(syscall.ENOSYS) || ret == -C.int(syscall.ENOTSUP) {
			return unsupported{err}
		}
		return err
	}
	l.setup.Isolated = true
	return nil
}

// flowReason is the PMD's explanation of a failed rte_flow call, unless it
// only repeats the errno.
func flowReason(ret C.int, msg *C.char) string {
	reason := C.GoString(msg)
	if strings.HasPrefix(strings.ToLower(reason), strings.ToLower(errnoError(ret).Error())) {
		return ""
	}
	return ": " + reason
}

// createRules creates the rules of isolated mode.
func (l *port) createRules(name string) error {
	for _, r := range l.plan.rules {
		cr := C.struct_pn_flow_rule{nb_queues: C.uint16_t(r.queues)}
		switch r.kind {
		case flowIPv4Dst:
			cr.kind = C.PN_FLOW_IPV4_DST
		case flowIPv6Dst:
			cr.kind = C.PN_FLOW_IPV6_DST
		case flowARPTarget:
			cr.kind = C.PN_FLOW_ARP_TPA
		}
		if r.mac != nil {
			cr.match_mac = 1
			for i, b := range r.mac {
				cr.mac[i] = C.uint8_t(b)
			}
		}
		for i, b := range r.addr.AsSlice() {
			cr.addr[i] = C.uint8_t(b)
		}
		if r.queues > 1 {
			cr.rss_hf = C.uint64_t(l.plan.rssHF)
			cr.rss_key_len = C.uint8_t(len(l.plan.rssKey))
			for i, b := range l.plan.rssKey {
				cr.rss_key[i] = C.uint8_t(b)
			}
		}
		var flow *C.struct_rte_flow
		var msg [256]C.char
		if ret := C.pn_flow_create(l.id, &cr, &flow, &msg[0], C.size_t(len(msg))); ret != 0 {
			err := fmt.Errorf("dpdk: isolated mode on %s: flow rule %q rejected: %w%s", name, r, errnoError(ret), flowReason(ret, &msg[0]))
			if ret == -C.int(syscall.ENOSYS) || ret == -C.int(syscall.ENOTSUP) {
				return unsupported{err}
			}
			return err
		}
		l.setup.FlowRules = append(l.setup.FlowRules, r.String())
	}
	return nil
}

// steering programs the RETA and reads the key back; it returns nil when
// the port's hashing cannot be predicted after all.
// New calls it with ctl held.
func (l *port) steering() *rssSteerer {
	n := 0
	var ci C.struct_pn_info
	if C.pn_port_info(l.id, &ci) == 0 {
		n = int(ci.reta_size)
	}
	if n == 0 {
		return nil
	}
	reta := make([]C.uint16_t, n)
	if C.pn_reta_program(l.id, C.uint16_t(n), C.uint16_t(l.cfg.Queues), &reta[0]) != 0 {
		return nil
	}
	var key [C.PN_MAX_KEY]C.uint8_t
	keyLen := C.uint8_t(len(key))
	var hf C.uint64_t
	if C.pn_rss_get(l.id, &key[0], &keyLen, &hf) != 0 {
		return nil
	}
	got := make([]byte, int(keyLen))
	for i := range got {
		got[i] = byte(key[i])
	}
	table := make([]uint16, n)
	for i, q := range reta {
		table[i] = uint16(q)
	}
	s, err := newRSSSteerer(got, uint64(hf), table, l.cfg.Queues)
	if err != nil || !slices.Equal(got, l.plan.rssKey) {
		return nil
	}
	return s
}

// Info describes the link.
func (l *port) Info() link.Info {
	info := l.info
	info.MAC = slices.Clone(l.info.MAC)
	return info
}

// Queues returns the queue pairs.
func (l *port) Queues() []link.Queue { return l.pqueues }

// Setup reports what New settled on.
func (l *port) Setup() Setup {
	s := l.setup
	s.FlowRules = slices.Clone(s.FlowRules)
	return s
}

// Close stops the port, waiting for bursts in progress, and releases it:
// a virtual device the link created is removed, and so is a PCI device it
// probed. Pending WaitReads return link.ErrClosed. A second Close returns
// link.ErrClosed.
func (l *port) Close() error {
	var err error = link.ErrClosed
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		for _, q := range l.queues {
			q.kick()
		}
		close(l.monitorStop)
		<-l.monitorDone
		ctl.Lock()
		defer ctl.Unlock()
		l.closeErr = l.teardown()
		err = l.closeErr
	})
	return err
}

// teardown releases everything open made, in reverse order: queues (after
// their bursts end), flow rules, the port, the device, the pool.
func (l *port) teardown() error {
	l.closed.Store(true)
	var errs []error
	for _, q := range l.queues {
		q.rxMu.Lock()
		q.txMu.Lock()
		q.closeWait()
	}
	if l.setup.Isolated {
		C.pn_flow_flush(l.id)
	}
	if l.plan != nil || l.removeVdev != "" || l.removeDev {
		var cname *C.char
		if l.removeVdev != "" {
			cname = C.CString(l.removeVdev)
			defer C.free(unsafe.Pointer(cname))
		}
		remove := C.int(0)
		if l.removeDev {
			remove = 1
		}
		var ret C.int
		if l.setup.Driver == "net_memif" {
			ret = C.pn_port_close_on_intr_thread(l.id, cname, remove)
		} else {
			ret = C.pn_port_close(l.id, cname, remove)
		}
		if ret != 0 && l.started {
			errs = append(errs, rteError(fmt.Sprintf("dpdk: closing port %d (%s)", l.id, l.cfg.Device), ret))
		}
	}
	for _, q := range l.queues {
		q.freeC()
		q.txMu.Unlock()
		q.rxMu.Unlock()
	}
	if l.pool != nil {
		C.pn_pool_free(l.pool)
		l.pool = nil
	}
	if l.bells != nil {
		l.bells.file.close()
		if l.bells.paths.role == "server" {
			os.Remove(l.bells.paths.shm)
		}
		l.bells = nil
	}
	return errors.Join(errs...)
}

// monitor polls the link status until Close.
func (l *port) monitor() {
	defer close(l.monitorDone)
	t := time.NewTicker(l.cfg.LinkPollInterval)
	defer t.Stop()
	for {
		select {
		case <-l.monitorStop:
			return
		case <-t.C:
			l.pollStatus()
		}
	}
}

// pollStatus reads the link status and counts changes.
func (l *port) pollStatus() LinkStatus {
	var cl C.struct_pn_link
	ok := !l.closed.Load() && C.pn_link_get(l.id, &cl) == 0
	l.statusMu.Lock()
	defer l.statusMu.Unlock()
	if ok {
		up := cl.up != 0
		if up != l.status.Up && l.statusKnown {
			l.status.Changes++
		}
		l.statusKnown = true
		l.status.Up, l.status.SpeedMbps, l.status.FullDuplex = up, uint32(cl.speed), cl.full_duplex != 0
	}
	return l.status
}

// Status returns the link status as last polled (every
// Config.LinkPollInterval).
func (l *port) Status() LinkStatus {
	l.statusMu.Lock()
	defer l.statusMu.Unlock()
	return l.status
}

// WaitUp polls the link status until the link is up or ctx is done.
func (l *port) WaitUp(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		if l.closed.Load() {
			return link.ErrClosed
		}
		if l.pollStatus().Up {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dpdk: waiting for %s to come up: %w", l.info.Name, ctx.Err())
		case <-t.C:
		}
	}
}

// Stats returns the link's counters.
func (l *port) Stats() Stats {
	var st Stats
	for _, q := range l.queues {
		st.Queues = append(st.Queues, q.stats.snapshot())
	}
	st.PoolSize = l.cfg.PoolSize
	st.LinkChanges = l.Status().Changes
	ctl.Lock()
	defer ctl.Unlock()
	if l.closed.Load() {
		return st
	}
	var cs C.struct_pn_stats
	if C.pn_stats_get(l.id, &cs) == 0 {
		st.RxMissed, st.RxErrors, st.TxErrors, st.RxNoMbuf = uint64(cs.imissed), uint64(cs.ierrors), uint64(cs.oerrors), uint64(cs.rx_nombuf)
	}
	st.PoolInUse = int(C.pn_pool_in_use(l.pool))
	return st
}

// setInterfaceMTU sets a kernel interface's MTU (ip link set dev IFACE mtu
// MTU), as net_af_packet's own mtu_set would if ethdev let it.
func setInterfaceMTU(iface string, mtu int) error {
	if iface == "" {
		return errors.New("no iface argument")
	}
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq(iface)
	if err != nil {
		return err
	}
	ifr.SetUint32(uint32(mtu))
	return unix.IoctlIfreq(s, unix.SIOCSIFMTU, ifr)
}
