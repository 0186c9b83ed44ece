//go:build rdma && linux && cgo

package rdma

/*
#cgo LDFLAGS: -libverbs
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// Bursts are at most this long (pollBatch on the Go side).
#define PN_BATCH 64

typedef struct {
	uint64_t id;
	uint32_t len;
	uint32_t status;
	uint32_t flags;
	uint32_t pad;
} pn_wc;

typedef struct {
	uint32_t buf;
	uint32_t len;
	uint32_t signaled;
} pn_swr;

typedef struct {
	int max_qp_wr, max_cqe, rss, max_rss_table, max_wq, rx_csum;
	int link_layer, port_state, comp_vectors;
} pn_caps;

static int pn_query(struct ibv_context *ctx, uint8_t port, pn_caps *c) {
	struct ibv_device_attr_ex a;
	memset(&a, 0, sizeof a);
	memset(c, 0, sizeof *c);
	int e = ibv_query_device_ex(ctx, NULL, &a);
	if (e == EOPNOTSUPP || e == ENOSYS) {
		memset(&a, 0, sizeof a);
		e = ibv_query_device(ctx, &a.orig_attr);
	}
	if (e)
		return e;
	const uint64_t need = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 | IBV_RX_HASH_SRC_IPV6 |
		IBV_RX_HASH_DST_IPV6 | IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_TCP |
		IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP;
	c->max_qp_wr = a.orig_attr.max_qp_wr;
	c->max_cqe = a.orig_attr.max_cqe;
	c->rss = (a.rss_caps.supported_qpts & (1u << IBV_QPT_RAW_PACKET)) &&
		(a.rss_caps.rx_hash_function & IBV_RX_HASH_FUNC_TOEPLITZ) &&
		(a.rss_caps.rx_hash_fields_mask & need) == need && a.max_wq_type_rq > 0;
	c->max_rss_table = a.rss_caps.max_rwq_indirection_table_size;
	c->max_wq = a.max_wq_type_rq;
	c->rx_csum = (a.raw_packet_caps & IBV_RAW_PACKET_CAP_IP_CSUM) != 0;
	struct ibv_port_attr pa;
	memset(&pa, 0, sizeof pa);
	e = ibv_query_port(ctx, port, &pa);
	if (e)
		return e;
	c->link_layer = pa.link_layer;
	c->port_state = pa.state;
	c->comp_vectors = ctx->num_comp_vectors;
	return 0;
}

static struct ibv_mr *pn_reg_mr(struct ibv_pd *pd, void *addr, size_t len) {
	return ibv_reg_mr(pd, addr, len, IBV_ACCESS_LOCAL_WRITE);
}

// pn_nonblock makes a completion channel's descriptor non-blocking, so that
// ibv_get_cq_event returns EAGAIN instead of waiting.
static int pn_nonblock(struct ibv_comp_channel *ch) {
	int fl = fcntl(ch->fd, F_GETFL);
	if (fl < 0 || fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return errno;
	return 0;
}

static int pn_channel_fd(struct ibv_comp_channel *ch) { return ch->fd; }

static struct ibv_wq *pn_create_wq(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq, uint32_t depth) {
	struct ibv_wq_init_attr a;
	memset(&a, 0, sizeof a);
	a.wq_type = IBV_WQT_RQ;
	a.max_wr = depth;
	a.max_sge = 1;
	a.pd = pd;
	a.cq = cq;
	return ibv_create_wq(ctx, &a);
}

static int pn_wq_state(struct ibv_wq *wq, int state) {
	struct ibv_wq_attr a;
	memset(&a, 0, sizeof a);
	a.attr_mask = IBV_WQ_ATTR_STATE;
	a.wq_state = state;
	return ibv_modify_wq(wq, &a);
}

static struct ibv_rwq_ind_table *pn_create_table(struct ibv_context *ctx, struct ibv_wq **wqs, uint32_t log_size) {
	struct ibv_rwq_ind_table_init_attr a;
	memset(&a, 0, sizeof a);
	a.log_ind_tbl_size = log_size;
	a.ind_tbl = wqs;
	return ibv_create_rwq_ind_table(ctx, &a);
}

static struct ibv_qp *pn_create_rss_qp(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_rwq_ind_table *tbl,
		uint8_t *key, uint8_t key_len, uint64_t fields) {
	struct ibv_qp_init_attr_ex a;
	memset(&a, 0, sizeof a);
	a.qp_type = IBV_QPT_RAW_PACKET;
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH;
	a.pd = pd;
	a.rwq_ind_tbl = tbl;
	a.rx_hash_conf.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
	a.rx_hash_conf.rx_hash_key_len = key_len;
	a.rx_hash_conf.rx_hash_key = key;
	a.rx_hash_conf.rx_hash_fields_mask = fields;
	return ibv_create_qp_ex(ctx, &a);
}

static struct ibv_qp *pn_create_raw_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
		uint32_t send_wr, uint32_t recv_wr) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.qp_type = IBV_QPT_RAW_PACKET;
	a.cap.max_send_wr = send_wr;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_wr = recv_wr;
	a.cap.max_recv_sge = recv_wr ? 1 : 0;
	return ibv_create_qp(pd, &a);
}

// pn_qp_state moves a raw packet QP to RESET, ERR, or (state < 0) through
// INIT and RTR to RTS.
static int pn_qp_state(struct ibv_qp *qp, int state, uint8_t port) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	if (state >= 0) {
		a.qp_state = state;
		return ibv_modify_qp(qp, &a, IBV_QP_STATE);
	}
	a.qp_state = IBV_QPS_INIT;
	a.port_num = port;
	int e = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT);
	if (e)
		return e;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	if ((e = ibv_modify_qp(qp, &a, IBV_QP_STATE)))
		return e;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

// pn_post_recv posts one receive per buffer index, to the WQ if there is
// one, else to the QP's own receive queue; it returns how many it posted
// and stores ibv_post_recv's error in *err.
static int pn_post_recv(struct ibv_wq *wq, struct ibv_qp *qp, const uint32_t *bufs, int n,
		uint64_t base, uint32_t size, uint32_t lkey, int *err) {
	struct ibv_recv_wr wr[PN_BATCH], *bad = NULL;
	struct ibv_sge sge[PN_BATCH];
	if (n > PN_BATCH)
		n = PN_BATCH;
	if (n <= 0)
		return 0;
	for (int i = 0; i < n; i++) {
		sge[i].addr = base + (uint64_t)bufs[i] * size;
		sge[i].length = size;
		sge[i].lkey = lkey;
		wr[i].wr_id = bufs[i];
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = 1;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
	}
	*err = wq ? ibv_post_wq_recv(wq, wr, &bad) : ibv_post_recv(qp, wr, &bad);
	return *err && bad ? (int)(bad - wr) : (*err ? 0 : n);
}

static int pn_post_send(struct ibv_qp *qp, const pn_swr *wrs, int n, uint64_t base, uint32_t size,
		uint32_t lkey, int *err) {
	struct ibv_send_wr wr[PN_BATCH], *bad = NULL;
	struct ibv_sge sge[PN_BATCH];
	if (n > PN_BATCH)
		n = PN_BATCH;
	if (n <= 0)
		return 0;
	memset(wr, 0, sizeof(wr[0]) * n);
	for (int i = 0; i < n; i++) {
		sge[i].addr = base + (uint64_t)wrs[i].buf * size;
		sge[i].length = wrs[i].len;
		sge[i].lkey = lkey;
		wr[i].wr_id = wrs[i].buf;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = 1;
		wr[i].opcode = IBV_WR_SEND;
		wr[i].send_flags = wrs[i].signaled ? IBV_SEND_SIGNALED : 0;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
	}
	*err = ibv_post_send(qp, wr, &bad);
	return *err && bad ? (int)(bad - wr) : (*err ? 0 : n);
}

static int pn_poll(struct ibv_cq *cq, pn_wc *out, int n) {
	struct ibv_wc wc[PN_BATCH];
	if (n > PN_BATCH)
		n = PN_BATCH;
	int got = ibv_poll_cq(cq, n, wc);
	for (int i = 0; i < got; i++) {
		out[i].id = wc[i].wr_id;
		out[i].len = wc[i].byte_len;
		out[i].status = wc[i].status;
		out[i].flags = wc[i].wc_flags;
	}
	return got;
}

static int pn_arm(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }

// pn_get_event takes one event from a non-blocking completion channel and
// acknowledges it: 1 if there was one, 0 if none (EAGAIN), -errno.
static int pn_get_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq;
	void *ctx;
	if (ibv_get_cq_event(ch, &cq, &ctx))
		return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
	ibv_ack_cq_events(cq, 1);
	return 1;
}

// pn_create_flow creates a flow rule on qp: frames to dmac (of ether_type
// if non-zero; to the IPv4 or IPv6 address dip if ipver is 4 or 6 and
// has_dip; of TCP or UDP if proto is 6 or 17). Byte order: network.
static struct ibv_flow *pn_create_flow(struct ibv_qp *qp, uint8_t port, uint16_t prio, uint32_t flags,
		const uint8_t *dmac, uint16_t ether_type, int ipver, const uint8_t *dip, int has_dip, uint8_t proto) {
	uint8_t buf[sizeof(struct ibv_flow_attr) + sizeof(struct ibv_flow_spec_eth) +
		sizeof(struct ibv_flow_spec_ipv6) + sizeof(struct ibv_flow_spec_tcp_udp)];
	memset(buf, 0, sizeof buf);
	struct ibv_flow_attr *attr = (struct ibv_flow_attr *)buf;
	uint8_t *p = buf + sizeof *attr;
	attr->type = IBV_FLOW_ATTR_NORMAL;
	attr->priority = prio;
	attr->port = port;
	attr->flags = flags;

	struct ibv_flow_spec_eth *eth = (struct ibv_flow_spec_eth *)p;
	eth->type = IBV_FLOW_SPEC_ETH;
	eth->size = sizeof *eth;
	memcpy(eth->val.dst_mac, dmac, 6);
	memset(eth->mask.dst_mac, 0xff, 6);
	if (ether_type) {
		eth->val.ether_type = htons(ether_type);
		eth->mask.ether_type = 0xffff;
	}
	p += sizeof *eth;
	attr->num_of_specs++;

	if (ipver == 4) {
		struct ibv_flow_spec_ipv4 *ip = (struct ibv_flow_spec_ipv4 *)p;
		ip->type = IBV_FLOW_SPEC_IPV4;
		ip->size = sizeof *ip;
		if (has_dip) {
			memcpy(&ip->val.dst_ip, dip, 4);
			ip->mask.dst_ip = 0xffffffff;
		}
		p += sizeof *ip;
		attr->num_of_specs++;
	} else if (ipver == 6) {
		struct ibv_flow_spec_ipv6 *ip = (struct ibv_flow_spec_ipv6 *)p;
		ip->type = IBV_FLOW_SPEC_IPV6;
		ip->size = sizeof *ip;
		if (has_dip) {
			memcpy(ip->val.dst_ip, dip, 16);
			memset(ip->mask.dst_ip, 0xff, 16);
		}
		p += sizeof *ip;
		attr->num_of_specs++;
	}
	if (proto == 6 || proto == 17) {
		struct ibv_flow_spec_tcp_udp *l4 = (struct ibv_flow_spec_tcp_udp *)p;
		l4->type = proto == 6 ? IBV_FLOW_SPEC_TCP : IBV_FLOW_SPEC_UDP;
		l4->size = sizeof *l4;
		p += sizeof *l4;
		attr->num_of_specs++;
	}
	attr->size = p - buf;
	return ibv_create_flow(qp, attr);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/link"
)

// New opens the RDMA port cfg names and sets the link up on it. Errors that
// say the host cannot run the link (no RDMA device, no verbs in the kernel,
// a port that is not Ethernet) match link.ErrNotSupported.
func New(cfg Config) (*Link, error) {
	cfg, err := cfg.check()
	if err != nil {
		return nil, err
	}
	var port Port
	switch {
	case cfg.Netdev != "":
		if port, err = LookupNetdev(cfg.Netdev); err != nil {
			return nil, err
		}
		if cfg.Device != "" && cfg.Device != port.Device || cfg.Port != 0 && cfg.Port != port.Port {
			return nil, fmt.Errorf("rdma: %s is %s port %d, not %s port %d", cfg.Netdev, port.Device, port.Port, cfg.Device, cfg.Port)
		}
	case cfg.Device != "":
		// libibverbs is the authority on device names: ask it first, so
		// that a host without verbs says so.
		if _, err := deviceNames(); err != nil {
			return nil, err
		}
		if port, err = LookupDevice(cfg.Device, cfg.Port); err != nil {
			return nil, err
		}
	default:
		if port, err = firstCandidate(); err != nil {
			if _, verr := deviceNames(); verr != nil {
				return nil, fmt.Errorf("%w; %w", err, verr)
			}
			return nil, err
		}
	}
	dev, err := openDevice(port.Device, port.Port)
	if err != nil {
		return nil, err
	}
	return build(cfg, port, dev)
}

// withDeviceList runs fn on libibverbs' device list.
func withDeviceList(fn func(devs []*C.struct_ibv_device) error) error {
	var n C.int
	list, errno := C.ibv_get_device_list(&n)
	if list == nil {
		return deviceListError(errno)
	}
	defer C.ibv_free_device_list(list)
	return fn(unsafe.Slice(list, int(n)))
}

// deviceNames lists the devices libibverbs sees.
func deviceNames() ([]string, error) {
	var names []string
	err := withDeviceList(func(devs []*C.struct_ibv_device) error {
		for _, d := range devs {
			names = append(names, C.GoString(C.ibv_get_device_name(d)))
		}
		return nil
	})
	return names, err
}

// deviceListError explains a failed ibv_get_device_list.
func deviceListError(errno error) error {
	if errors.Is(errno, syscall.ENOSYS) {
		return fmt.Errorf("rdma: ibv_get_device_list failed with ENOSYS (%w): the kernel offers no verbs interface "+
			"(no RDMA devices, or ib_uverbs not loaded or not built: check `rdma link show` and `ibv_devices`): %w",
			errno, link.ErrNotSupported)
	}
	if errno == nil {
		errno = syscall.ENODEV
	}
	return fmt.Errorf("rdma: ibv_get_device_list: %w: %w", errno, link.ErrNotSupported)
}

// verbsDevice is an opened device and what the link built on it.
type verbsDevice struct {
	ctx  *C.struct_ibv_context
	name string
	port int
	cp   deviceCaps

	pd     *C.struct_ibv_pd
	mr     *C.struct_ibv_mr
	region []byte
	frame  int
	tables []*C.struct_ibv_rwq_ind_table
	rssQPs []*C.struct_ibv_qp
	flows  []*C.struct_ibv_flow
	queues []*verbsQueue
	// wqArray holds the indirection table's WQ pointers in C memory.
	wqArray unsafe.Pointer
}

var _ device = (*verbsDevice)(nil)

// openDevice opens device name and checks its port.
func openDevice(name string, port int) (*verbsDevice, error) {
	var v *verbsDevice
	var names []string
	err := withDeviceList(func(devs []*C.struct_ibv_device) error {
		for _, d := range devs {
			dn := C.GoString(C.ibv_get_device_name(d))
			names = append(names, dn)
			if dn != name {
				continue
			}
			ctx, err := C.ibv_open_device(d)
			if ctx == nil {
				return fmt.Errorf("rdma: opening %s: %w", name, errnoOr(err, syscall.ENODEV))
			}
			v = &verbsDevice{ctx: ctx, name: name, port: max(port, 1)}
			if err := v.query(); err != nil {
				C.ibv_close_device(ctx)
				return err
			}
			return nil
		}
		return &NoDeviceError{Device: name, Reason: ReasonNoSuchDevice,
			Detail: fmt.Sprintf("libibverbs lists no such device (devices: %s)", strings.Join(names, ", "))}
	})
	if err != nil {
		return nil, err
	}
	return v, nil
}

func (v *verbsDevice) query() error {
	var c C.pn_caps
	if e := C.pn_query(v.ctx, C.uint8_t(v.port), &c); e != 0 {
		return fmt.Errorf("rdma: querying %s port %d: %w", v.name, v.port, syscall.Errno(e))
	}
	if c.link_layer != C.IBV_LINK_LAYER_ETHERNET {
		return &NoDeviceError{Device: v.name, Reason: ReasonNotEthernet,
			Detail: fmt.Sprintf("port %d is not Ethernet: raw Ethernet frames need an Ethernet (RoCE) port", v.port)}
	}
	v.cp = deviceCaps{
		maxQueueDepth: int(c.max_qp_wr),
		maxCQE:        int(c.max_cqe),
		rss:           c.rss != 0,
		maxRSSTable:   int(c.max_rss_table),
		maxWQs:        int(c.max_wq),
		rxChecksum:    c.rx_csum != 0,
	}
	return nil
}

func (v *verbsDevice) caps() deviceCaps { return v.cp }

// Hash fields of the hashing QPs, by class.
var classFields = [numClasses]C.uint64_t{
	classTCP4: C.IBV_RX_HASH_SRC_IPV4 | C.IBV_RX_HASH_DST_IPV4 | C.IBV_RX_HASH_SRC_PORT_TCP | C.IBV_RX_HASH_DST_PORT_TCP,
	classUDP4: C.IBV_RX_HASH_SRC_IPV4 | C.IBV_RX_HASH_DST_IPV4 | C.IBV_RX_HASH_SRC_PORT_UDP | C.IBV_RX_HASH_DST_PORT_UDP,
	classTCP6: C.IBV_RX_HASH_SRC_IPV6 | C.IBV_RX_HASH_DST_IPV6 | C.IBV_RX_HASH_SRC_PORT_TCP | C.IBV_RX_HASH_DST_PORT_TCP,
	classUDP6: C.IBV_RX_HASH_SRC_IPV6 | C.IBV_RX_HASH_DST_IPV6 | C.IBV_RX_HASH_SRC_PORT_UDP | C.IBV_RX_HASH_DST_PORT_UDP,
}

// setup implements device. On error, what was built is left for close.
func (v *verbsDevice) setup(p *setupPlan) ([]byte, []queuePair, error) {
	var err error
	pd, errno := C.ibv_alloc_pd(v.ctx)
	if pd == nil {
		return nil, nil, v.fail("allocating a protection domain", errno)
	}
	v.pd = pd
	v.frame = p.frameSize
	size := p.buffers() * p.frameSize
	v.region, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, nil, fmt.Errorf("rdma: mapping %d bytes of frame buffers: %w", size, err)
	}
	mr, errno := C.pn_reg_mr(pd, unsafe.Pointer(&v.region[0]), C.size_t(size))
	if mr == nil {
		return nil, nil, v.fail(fmt.Sprintf("registering %d bytes of frame buffers (check `ulimit -l`)", size), errno)
	}
	v.mr = mr
	qps := make([]queuePair, p.queues)
	for i := range p.queues {
		q, err := v.newQueue(p, i)
		if err != nil {
			return nil, nil, err
		}
		qps[i] = q
	}
	// The receive QP of each class: a hashing QP over the indirection
	// table, or queue 0's own QP.
	var targets [numClasses]*C.struct_ibv_qp
	if p.rss != nil {
		if err := v.setupRSS(p, &targets); err != nil {
			return nil, nil, err
		}
	} else {
		for c := range targets {
			targets[c] = v.queues[0].qp
		}
	}
	for _, r := range p.flows {
		if err := v.addFlow(r, targets[r.Class]); err != nil {
			return nil, nil, err
		}
	}
	return v.region, qps, nil
}

// setupRSS creates the indirection tables (the spread over every queue's
// WQ, and queue 0's alone for what is not hashed) and a hashing QP per
// class.
func (v *verbsDevice) setupRSS(p *setupPlan, targets *[numClasses]*C.struct_ibv_qp) error {
	n := len(p.rss.table)
	ptrSize := int(unsafe.Sizeof((*C.struct_ibv_wq)(nil)))
	v.wqArray = C.calloc(C.size_t(n+1), C.size_t(ptrSize))
	wqs := unsafe.Slice((**C.struct_ibv_wq)(v.wqArray), n+1)
	for i, q := range p.rss.table {
		wqs[i] = v.queues[q].wq
	}
	wqs[n] = v.queues[0].wq
	spread, errno := C.pn_create_table(v.ctx, &wqs[0], C.uint32_t(bits.TrailingZeros(uint(n))))
	if spread == nil {
		return v.fail(fmt.Sprintf("creating an RSS indirection table of %d entries", n), errno)
	}
	v.tables = append(v.tables, spread)
	single, errno := C.pn_create_table(v.ctx, &wqs[n], 0)
	if single == nil {
		return v.fail("creating a one-entry indirection table", errno)
	}
	v.tables = append(v.tables, single)
	key := C.CBytes(p.rss.key)
	defer C.free(key)
	for c := range numClasses {
		tbl, fields := spread, classFields[c]
		if c == classOther {
			tbl = single
		}
		qp, errno := C.pn_create_rss_qp(v.ctx, v.pd, tbl, (*C.uint8_t)(key), C.uint8_t(len(p.rss.key)), fields)
		if qp == nil && c == classOther {
			// A device that wants hash fields: any will do on a
			// one-entry table.
			qp, errno = C.pn_create_rss_qp(v.ctx, v.pd, tbl, (*C.uint8_t)(key), C.uint8_t(len(p.rss.key)), classFields[classTCP4])
		}
		if qp == nil {
			return v.fail(fmt.Sprintf("creating the %s RSS queue pair", c), errno)
		}
		v.rssQPs = append(v.rssQPs, qp)
		targets[c] = qp
	}
	return nil
}

// addFlow creates flow rule r on qp.
func (v *verbsDevice) addFlow(r flowRule, qp *C.struct_ibv_qp) error {
	var mac [6]C.uint8_t
	for i := range mac {
		mac[i] = C.uint8_t(r.DstMAC[i])
	}
	var dip [16]C.uint8_t
	ipver, has := 0, 0
	switch r.EtherType {
	case etherTypeIPv4:
		ipver = 4
	case etherTypeIPv6:
		ipver = 6
	}
	if r.DstIP.IsValid() {
		has = 1
		for i, b := range r.DstIP.AsSlice() {
			dip[i] = C.uint8_t(b)
		}
	}
	if r.Proto == 0 && !r.DstIP.IsValid() {
		ipver = 0 // the EtherType alone
	}
	flags := C.uint32_t(0)
	if r.DontTrap {
		flags = C.IBV_FLOW_ATTR_FLAGS_DONT_TRAP
	}
	f, errno := C.pn_create_flow(qp, C.uint8_t(v.port), C.uint16_t(r.Priority), flags, &mac[0],
		C.uint16_t(r.EtherType), C.int(ipver), &dip[0], C.int(has), C.uint8_t(r.Proto))
	if f == nil {
		return v.fail("creating flow rule "+r.String(), errno)
	}
	v.flows = append(v.flows, f)
	return nil
}

// fail describes a failed verbs call, with a hint for the usual causes.
func (v *verbsDevice) fail(what string, errno error) error {
	errno = errnoOr(errno, syscall.EINVAL)
	hint := ""
	switch {
	case errors.Is(errno, syscall.EPERM), errors.Is(errno, syscall.EACCES):
		hint = " (raw packet queue pairs and flow rules need CAP_NET_RAW)"
	case errors.Is(errno, syscall.EOPNOTSUPP), errors.Is(errno, syscall.ENOSYS):
		hint = " (the device's driver does not support it)"
		errno = fmt.Errorf("%w: %w", errno, link.ErrNotSupported)
	case errors.Is(errno, syscall.ENOMEM):
		hint = " (out of memory, or of locked memory: check `ulimit -l`)"
	}
	return fmt.Errorf("rdma: %s port %d: %s: %w%s", v.name, v.port, what, errno, hint)
}

func errnoOr(err, dflt error) error {
	if err == nil || errors.Is(err, syscall.Errno(0)) {
		return dflt
	}
	return err
}

// close implements device: flow rules, hashing QPs, tables, queues, memory
// region, protection domain, device, in that order.
func (v *verbsDevice) close() error {
	d := &destroyer{prefix: "rdma: " + v.name}
	check := d.check
	for _, f := range v.flows {
		check("a flow rule", C.ibv_destroy_flow(f))
	}
	for _, qp := range v.rssQPs {
		check("an RSS queue pair", C.ibv_destroy_qp(qp))
	}
	for _, t := range v.tables {
		check("an indirection table", C.ibv_destroy_rwq_ind_table(t))
	}
	if v.wqArray != nil {
		C.free(v.wqArray)
	}
	for _, q := range v.queues {
		q.destroy(d)
	}
	if v.mr != nil {
		check("the memory region", C.ibv_dereg_mr(v.mr))
	}
	if v.region != nil {
		d.errs = append(d.errs, unix.Munmap(v.region))
	}
	if v.pd != nil {
		check("the protection domain", C.ibv_dealloc_pd(v.pd))
	}
	check("the device context", C.ibv_close_device(v.ctx))
	return errors.Join(d.errs...)
}

// destroyer collects the errors of destroying verbs objects.
type destroyer struct {
	prefix string
	errs   []error
}

func (d *destroyer) check(what string, e C.int) {
	if e != 0 {
		d.errs = append(d.errs, fmt.Errorf("%s: destroying %s: %w", d.prefix, what, syscall.Errno(e)))
	}
}

// verbsQueue implements queuePair over a completion channel, two completion
// queues, a receive WQ (with RSS) and a raw packet QP.
type verbsQueue struct {
	dev      *verbsDevice
	index    int
	ch       *C.struct_ibv_comp_channel
	rcq, scq *C.struct_ibv_cq
	wq       *C.struct_ibv_wq // nil: receives on qp's own queue
	qp       *C.struct_ibv_qp

	// waitFile owns a duplicate of the channel's descriptor, registered
	// with the Go netpoller; wakeRecv expires its read deadline.
	waitFile *os.File
	wait     syscall.RawConn
	waitFn   func(fd uintptr) bool
	waitErr  error

	cwcs  [pollBatch]C.pn_wc
	cbufs [pollBatch]C.uint32_t
	cwrs  [pollBatch]C.pn_swr
}

var _ queuePair = (*verbsQueue)(nil)

func (v *verbsDevice) newQueue(p *setupPlan, i int) (*verbsQueue, error) {
	q := &verbsQueue{dev: v, index: i}
	var errno error
	if q.ch, errno = C.ibv_create_comp_channel(v.ctx); q.ch == nil {
		return nil, v.fail(fmt.Sprintf("queue %d: creating a completion channel", i), errno)
	}
	v.queues = append(v.queues, q) // for close, from here on
	if e := C.pn_nonblock(q.ch); e != 0 {
		return nil, v.fail("making the completion channel non-blocking", syscall.Errno(e))
	}
	fd, err := unix.FcntlInt(uintptr(C.pn_channel_fd(q.ch)), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("rdma: duplicating the completion channel: %w", err)
	}
	q.waitFile = os.NewFile(uintptr(fd), fmt.Sprintf("%s completion channel %d", v.name, i))
	if q.wait, err = q.waitFile.SyscallConn(); err != nil {
		return nil, err
	}
	q.waitFn = q.getEvent
	vectors := max(int(v.ctx.num_comp_vectors), 1)
	if q.rcq, errno = C.ibv_create_cq(v.ctx, C.int(p.rxDepth), nil, q.ch, C.int(i%vectors)); q.rcq == nil {
		return nil, v.fail(fmt.Sprintf("queue %d: creating a receive completion queue of %d", i, p.rxDepth), errno)
	}
	if q.scq, errno = C.ibv_create_cq(v.ctx, C.int(p.txDepth), nil, nil, 0); q.scq == nil {
		return nil, v.fail(fmt.Sprintf("queue %d: creating a send completion queue of %d", i, p.txDepth), errno)
	}
	recvWR := 0
	if p.rss != nil {
		if q.wq, errno = C.pn_create_wq(v.ctx, v.pd, q.rcq, C.uint32_t(p.rxDepth)); q.wq == nil {
			return nil, v.fail(fmt.Sprintf("queue %d: creating a receive work queue", i), errno)
		}
	} else if i == 0 {
		recvWR = p.rxDepth
	}
	if q.qp, errno = C.pn_create_raw_qp(v.pd, q.scq, q.rcq, C.uint32_t(p.txDepth), C.uint32_t(recvWR)); q.qp == nil {
		return nil, v.fail(fmt.Sprintf("queue %d: creating a raw packet queue pair", i), errno)
	}
	if err := q.restart(); err != nil {
		return nil, err
	}
	return q, nil
}

func (q *verbsQueue) postRecv(bufs []uint32) (int, error) {
	n := min(len(bufs), len(q.cbufs))
	for i := range n {
		q.cbufs[i] = C.uint32_t(bufs[i])
	}
	var e C.int
	got := C.pn_post_recv(q.wq, q.qp, &q.cbufs[0], C.int(n), C.uint64_t(uintptr(unsafe.Pointer(&q.dev.region[0]))),
		C.uint32_t(q.dev.frame), q.dev.mr.lkey, &e)
	if e != 0 {
		return int(got), syscall.Errno(e)
	}
	return int(got), nil
}

func (q *verbsQueue) poll(cq *C.struct_ibv_cq, wcs []completion) (int, error) {
	n := min(len(wcs), len(q.cwcs))
	got := int(C.pn_poll(cq, &q.cwcs[0], C.int(n)))
	if got < 0 {
		return 0, fmt.Errorf("ibv_poll_cq: %d", got)
	}
	for i, c := range q.cwcs[:got] {
		wc := completion{id: uint64(c.id), length: uint32(c.len), code: uint32(c.status)}
		switch c.status {
		case C.IBV_WC_SUCCESS:
			wc.csumOK = c.flags&C.IBV_WC_IP_CSUM_OK != 0
		case C.IBV_WC_WR_FLUSH_ERR:
			wc.status = wcFlushed
		default:
			wc.status = wcError
		}
		wcs[i] = wc
	}
	return got, nil
}

func (q *verbsQueue) pollRecv(wcs []completion) (int, error) { return q.poll(q.rcq, wcs) }
func (q *verbsQueue) pollSend(wcs []completion) (int, error) { return q.poll(q.scq, wcs) }

func (q *verbsQueue) postSend(wrs []sendWR) (int, error) {
	posted := 0
	for len(wrs) > 0 {
		n := min(len(wrs), len(q.cwrs))
		for i, wr := range wrs[:n] {
			q.cwrs[i] = C.pn_swr{buf: C.uint32_t(wr.buf), len: C.uint32_t(wr.length)}
			if wr.signaled {
				q.cwrs[i].signaled = 1
			}
		}
		var e C.int
		got := int(C.pn_post_send(q.qp, &q.cwrs[0], C.int(n), C.uint64_t(uintptr(unsafe.Pointer(&q.dev.region[0]))),
			C.uint32_t(q.dev.frame), q.dev.mr.lkey, &e))
		posted += got
		if e != 0 {
			return posted, syscall.Errno(e)
		}
		wrs = wrs[n:]
	}
	return posted, nil
}

func (q *verbsQueue) armRecv() error {
	if e := C.pn_arm(q.rcq); e != 0 {
		return syscall.Errno(e)
	}
	return nil
}

// waitRecv parks in the netpoller on the completion channel: getEvent
// takes an event if one is there, else the netpoller waits for the
// descriptor to become readable.
func (q *verbsQueue) waitRecv(interrupted func() bool) error {
	// Clear an expired deadline before looking at interrupted, so that an
	// Interrupt racing with this sets the deadline after the clear.
	q.waitFile.SetReadDeadline(time.Time{})
	if interrupted() {
		return nil
	}
	q.waitErr = nil
	err := q.wait.Read(q.waitFn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	if err != nil {
		return err
	}
	return q.waitErr
}

func (q *verbsQueue) getEvent(uintptr) bool {
	switch r := C.pn_get_event(q.ch); {
	case r > 0:
		return true
	case r < 0:
		q.waitErr = fmt.Errorf("ibv_get_cq_event: %w", syscall.Errno(-r))
		return true
	}
	return false
}

// wakeRecv expires the wait's deadline; after close it does nothing.
func (q *verbsQueue) wakeRecv() { q.waitFile.SetReadDeadline(time.Now()) }

func (q *verbsQueue) stop() error {
	var errs []error
	if e := C.pn_qp_state(q.qp, C.IBV_QPS_ERR, 0); e != 0 {
		errs = append(errs, fmt.Errorf("moving the queue pair to the error state: %w", syscall.Errno(e)))
	}
	if q.wq != nil {
		if e := C.pn_wq_state(q.wq, C.IBV_WQS_ERR); e != 0 {
			errs = append(errs, fmt.Errorf("moving the work queue to the error state: %w", syscall.Errno(e)))
		}
	}
	return errors.Join(errs...)
}

// restart moves the QP through RESET to RTS and the WQ through RESET to
// RDY; setup uses it for the first start.
func (q *verbsQueue) restart() error {
	if e := C.pn_qp_state(q.qp, C.IBV_QPS_RESET, 0); e != 0 {
		return q.dev.fail(fmt.Sprintf("queue %d: resetting the queue pair", q.index), syscall.Errno(e))
	}
	if e := C.pn_qp_state(q.qp, -1, C.uint8_t(q.dev.port)); e != 0 {
		return q.dev.fail(fmt.Sprintf("queue %d: moving the queue pair to ready-to-send", q.index), syscall.Errno(e))
	}
	if q.wq != nil {
		if e := C.pn_wq_state(q.wq, C.IBV_WQS_RESET); e != 0 {
			return q.dev.fail(fmt.Sprintf("queue %d: resetting the work queue", q.index), syscall.Errno(e))
		}
		if e := C.pn_wq_state(q.wq, C.IBV_WQS_RDY); e != 0 {
			return q.dev.fail(fmt.Sprintf("queue %d: moving the work queue to ready", q.index), syscall.Errno(e))
		}
	}
	return nil
}

// destroy frees the queue's objects, the QP first.
func (q *verbsQueue) destroy(d *destroyer) {
	check := func(what string, e C.int) { d.check(fmt.Sprintf("queue %d's %s", q.index, what), e) }
	if q.qp != nil {
		check("queue pair", C.ibv_destroy_qp(q.qp))
	}
	if q.wq != nil {
		check("work queue", C.ibv_destroy_wq(q.wq))
	}
	if q.rcq != nil {
		check("receive completion queue", C.ibv_destroy_cq(q.rcq))
	}
	if q.scq != nil {
		check("send completion queue", C.ibv_destroy_cq(q.scq))
	}
	if q.waitFile != nil {
		d.errs = append(d.errs, q.waitFile.Close())
	}
	if q.ch != nil {
		check("completion channel", C.ibv_destroy_comp_channel(q.ch))
	}
}
