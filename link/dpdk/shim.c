//go:build dpdk && linux && cgo

#include <errno.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_alarm.h>
#include <rte_bus_vdev.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_log.h>
#include <rte_flow.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "shim.h"

// fix_signal_stacks adds SA_ONSTACK to signal handlers installed without
// it. PMDs install handlers of their own (net_tap: a realtime signal for
// its receive trigger); the kernel runs a handler without SA_ONSTACK on
// the interrupted thread's stack, which on a Go thread is a goroutine's
// small stack. With SA_ONSTACK it runs on the signal stack Go gives every
// thread it knows.
static void fix_signal_stacks(void)
{
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;
		if (sigaction(sig, NULL, &sa) != 0)
			continue;
		if (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN || (sa.sa_flags & SA_ONSTACK))
			continue;
		sa.sa_flags |= SA_ONSTACK;
		sigaction(sig, &sa, NULL);
	}
}

int pn_eal_init(int argc, char **argv, int *rte_err)
{
	rte_errno = 0;
	int ret = rte_eal_init(argc, argv);
	*rte_err = rte_errno;
	fix_signal_stacks();
	return ret;
}

const char *pn_strerror(int err) { return rte_strerror(err); }

int pn_vdev_create(const char *name, const char *args)
{
	int ret = rte_vdev_init(name, args);
	fix_signal_stacks();
	return ret;
}

int pn_vdev_remove(const char *name) { return rte_vdev_uninit(name); }

int pn_dev_probe(const char *devargs)
{
	int ret = rte_dev_probe(devargs);
	fix_signal_stacks();
	return ret;
}

int pn_port_by_name(const char *name, uint16_t *port)
{
	return rte_eth_dev_get_port_by_name(name, port);
}

void pn_port_list(char *buf, size_t len)
{
	uint16_t p;
	size_t used = 0;
	buf[0] = 0;
	RTE_ETH_FOREACH_DEV(p)
	{
		char name[RTE_ETH_NAME_MAX_LEN];
		if (rte_eth_dev_get_name_by_port(p, name) != 0)
			continue;
		int n = snprintf(buf + used, len - used, "%s%s", used ? "," : "", name);
		if (n < 0 || (size_t)n >= len - used)
			break;
		used += n;
	}
}

int pn_port_info(uint16_t port, struct pn_info *out)
{
	struct rte_eth_dev_info info;
	int ret = rte_eth_dev_info_get(port, &info);
	if (ret != 0)
		return ret;
	memset(out, 0, sizeof(*out));
	snprintf(out->driver, sizeof(out->driver), "%s", info.driver_name ? info.driver_name : "");
	rte_eth_dev_get_name_by_port(port, out->name);
	out->max_rx_queues = info.max_rx_queues;
	out->max_tx_queues = info.max_tx_queues;
	out->max_rx_pktlen = info.max_rx_pktlen;
	out->min_mtu = info.min_mtu;
	out->max_mtu = info.max_mtu;
	if (rte_eth_dev_get_mtu(port, &out->mtu) != 0)
		out->mtu = RTE_ETHER_MTU;
	out->rx_offload_capa = info.rx_offload_capa;
	out->tx_offload_capa = info.tx_offload_capa;
	out->flow_type_rss_offloads = info.flow_type_rss_offloads;
	out->reta_size = info.reta_size;
	out->hash_key_size = info.hash_key_size;
	struct rte_ether_addr mac;
	if (rte_eth_macaddr_get(port, &mac) == 0)
		memcpy(out->mac, mac.addr_bytes, 6);
	out->socket_id = rte_eth_dev_socket_id(port);
	return 0;
}

int pn_port_configure(uint16_t port, struct pn_conf *c)
{
	struct rte_eth_conf conf;
	memset(&conf, 0, sizeof(conf));
	conf.rxmode.offloads = c->rx_offloads;
	conf.txmode.offloads = c->tx_offloads;
	if (c->rss) {
		conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
		conf.rx_adv_conf.rss_conf.rss_key = c->rss_key;
		conf.rx_adv_conf.rss_conf.rss_key_len = c->rss_key_len;
		conf.rx_adv_conf.rss_conf.rss_hf = c->rss_hf;
	}
	conf.intr_conf.rxq = c->rxq_intr ? 1 : 0;
	int ret = rte_eth_dev_configure(port, c->nb_queues, c->nb_queues, &conf);
	if (ret != 0)
		return ret;
	return rte_eth_dev_adjust_nb_rx_tx_desc(port, &c->nb_rxd, &c->nb_txd);
}

int pn_rxq_setup(uint16_t port, uint16_t q, uint16_t nb_rxd, uint64_t offloads, struct rte_mempool *pool)
{
	struct rte_eth_dev_info info;
	int ret = rte_eth_dev_info_get(port, &info);
	if (ret != 0)
		return ret;
	struct rte_eth_rxconf rxconf = info.default_rxconf;
	rxconf.offloads = offloads;
	int socket = rte_eth_dev_socket_id(port);
	return rte_eth_rx_queue_setup(port, q, nb_rxd, socket < 0 ? SOCKET_ID_ANY : socket, &rxconf, pool);
}

int pn_txq_setup(uint16_t port, uint16_t q, uint16_t nb_txd, uint64_t offloads)
{
	struct rte_eth_dev_info info;
	int ret = rte_eth_dev_info_get(port, &info);
	if (ret != 0)
		return ret;
	struct rte_eth_txconf txconf = info.default_txconf;
	txconf.offloads = offloads;
	int socket = rte_eth_dev_socket_id(port);
	return rte_eth_tx_queue_setup(port, q, nb_txd, socket < 0 ? SOCKET_ID_ANY : socket, &txconf);
}

int pn_port_start(uint16_t port) { return rte_eth_dev_start(port); }

int pn_port_close(uint16_t port, const char *remove_name, int remove_dev)
{
	struct rte_eth_dev_info info;
	struct rte_device *dev = NULL;
	if (rte_eth_dev_info_get(port, &info) == 0)
		dev = info.device;
	int ret = rte_eth_dev_stop(port);
	int cret = rte_eth_dev_close(port);
	if (ret == 0)
		ret = cret;
	if (remove_name != NULL) {
		int r = rte_vdev_uninit(remove_name);
		if (ret == 0 && r != -ENOENT)
			ret = r;
	} else if (remove_dev && dev != NULL) {
		int r = rte_dev_remove(dev);
		if (ret == 0)
			ret = r;
	}
	return ret;
}

struct pn_close_req {
	uint16_t port;
	const char *remove_name;
	int remove_dev;
	int ret;
	sem_t done;
};

static void pn_close_req_run(void *arg)
{
	struct pn_close_req *r = arg;
	r->ret = pn_port_close(r->port, r->remove_name, r->remove_dev);
	sem_post(&r->done);
}

int pn_port_close_on_intr_thread(uint16_t port, const char *remove_name, int remove_dev)
{
	struct pn_close_req r = {.port = port, .remove_name = remove_name, .remove_dev = remove_dev};
	if (sem_init(&r.done, 0, 0) != 0)
		return -errno;
	// An alarm's callback runs on the interrupt thread.
	int ret = rte_eal_alarm_set(1, pn_close_req_run, &r);
	if (ret == 0) {
		// sem_wait is not restarted after a signal handler, and Go
		// signals its threads (preemption) all the time.
		while (sem_wait(&r.done) != 0 && errno == EINTR)
			;
		ret = r.ret;
	}
	sem_destroy(&r.done);
	return ret;
}

int pn_set_mtu(uint16_t port, uint16_t mtu) { return rte_eth_dev_set_mtu(port, mtu); }

int pn_set_mac(uint16_t port, const uint8_t *mac)
{
	struct rte_ether_addr a;
	memcpy(a.addr_bytes, mac, 6);
	return rte_eth_dev_default_mac_addr_set(port, &a);
}

int pn_promiscuous(uint16_t port) { return rte_eth_promiscuous_enable(port); }

int pn_allmulticast(uint16_t port) { return rte_eth_allmulticast_enable(port); }

int pn_reta_program(uint16_t port, uint16_t reta_size, uint16_t nb_queues, uint16_t *reta)
{
	size_t groups = (reta_size + RTE_ETH_RETA_GROUP_SIZE - 1) / RTE_ETH_RETA_GROUP_SIZE;
	struct rte_eth_rss_reta_entry64 *conf = calloc(groups, sizeof(*conf));
	if (conf == NULL)
		return -ENOMEM;
	for (uint16_t i = 0; i < reta_size; i++) {
		struct rte_eth_rss_reta_entry64 *g = &conf[i / RTE_ETH_RETA_GROUP_SIZE];
		g->mask |= 1ULL << (i % RTE_ETH_RETA_GROUP_SIZE);
		g->reta[i % RTE_ETH_RETA_GROUP_SIZE] = i % nb_queues;
	}
	int ret = rte_eth_dev_rss_reta_update(port, conf, reta_size);
	if (ret == 0) {
		for (size_t g = 0; g < groups; g++)
			memset(conf[g].reta, 0xff, sizeof(conf[g].reta));
		ret = rte_eth_dev_rss_reta_query(port, conf, reta_size);
	}
	if (ret == 0)
		for (uint16_t i = 0; i < reta_size; i++)
			reta[i] = conf[i / RTE_ETH_RETA_GROUP_SIZE].reta[i % RTE_ETH_RETA_GROUP_SIZE];
	free(conf);
	return ret;
}

int pn_rss_get(uint16_t port, uint8_t *key, uint8_t *key_len, uint64_t *hf)
{
	struct rte_eth_rss_conf conf;
	memset(&conf, 0, sizeof(conf));
	conf.rss_key = key;
	conf.rss_key_len = *key_len;
	int ret = rte_eth_dev_rss_hash_conf_get(port, &conf);
	if (ret != 0)
		return ret;
	*key_len = conf.rss_key_len;
	*hf = conf.rss_hf;
	return 0;
}

int pn_link_get(uint16_t port, struct pn_link *out)
{
	struct rte_eth_link link;
	memset(&link, 0, sizeof(link));
	int ret = rte_eth_link_get_nowait(port, &link);
	if (ret != 0)
		return ret;
	out->speed = link.link_speed;
	out->up = link.link_status == RTE_ETH_LINK_UP;
	out->full_duplex = link.link_duplex == RTE_ETH_LINK_FULL_DUPLEX;
	return 0;
}

int pn_stats_get(uint16_t port, struct pn_stats *out)
{
	struct rte_eth_stats st;
	int ret = rte_eth_stats_get(port, &st);
	if (ret != 0)
		return ret;
	out->imissed = st.imissed;
	out->ierrors = st.ierrors;
	out->oerrors = st.oerrors;
	out->rx_nombuf = st.rx_nombuf;
	return 0;
}

int pn_rx_intr_fd(uint16_t port, uint16_t q)
{
	// ethdev logs an error for ports without receive interrupts, which
	// are no error here: silence it for the call.
	int level = rte_log_get_level(rte_eth_dev_logtype);
	if (level >= 0)
		rte_log_set_level(rte_eth_dev_logtype, RTE_LOG_CRIT);
	int fd = rte_eth_dev_rx_intr_ctl_q_get_fd(port, q);
	if (level >= 0)
		rte_log_set_level(rte_eth_dev_logtype, level);
	return fd < 0 ? -ENOTSUP : fd;
}

int pn_rx_intr_enable(uint16_t port, uint16_t q) { return rte_eth_dev_rx_intr_enable(port, q); }

int pn_rx_intr_disable(uint16_t port, uint16_t q) { return rte_eth_dev_rx_intr_disable(port, q); }

struct rte_mempool *pn_pool_create(const char *name, unsigned n, unsigned data_room, int socket, int *err)
{
	// No per-lcore cache: the pollers are goroutines on threads EAL does not
	// know, which use none.
	struct rte_mempool *mp = rte_pktmbuf_pool_create(name, n, 0, 0, data_room + RTE_PKTMBUF_HEADROOM,
							 socket < 0 ? SOCKET_ID_ANY : socket);
	*err = mp == NULL ? rte_errno : 0;
	return mp;
}

void pn_pool_free(struct rte_mempool *mp) { rte_mempool_free(mp); }

unsigned pn_pool_in_use(struct rte_mempool *mp) { return rte_mempool_in_use_count(mp); }

static void flow_msg(const struct rte_flow_error *e, char *msg, size_t len)
{
	snprintf(msg, len, "%s (rte_flow error type %d)", e->message ? e->message : "the PMD gave no reason",
		 (int)e->type);
}

int pn_flow_isolate(uint16_t port, int set, char *msg, size_t len)
{
	struct rte_flow_error e;
	memset(&e, 0, sizeof(e));
	int ret = rte_flow_isolate(port, set, &e);
	if (ret != 0)
		flow_msg(&e, msg, len);
	return ret;
}

int pn_flow_create(uint16_t port, const struct pn_flow_rule *r, struct rte_flow **out, char *msg, size_t len)
{
	struct rte_flow_attr attr = {.ingress = 1};
	struct rte_flow_item pattern[3];
	struct rte_flow_item_eth eth_spec, eth_mask;
	struct rte_flow_item_ipv4 ip4_spec, ip4_mask;
	struct rte_flow_item_ipv6 ip6_spec, ip6_mask;
	struct rte_flow_item_arp_eth_ipv4 arp_spec, arp_mask;
	memset(pattern, 0, sizeof(pattern));
	memset(&eth_spec, 0, sizeof(eth_spec));
	memset(&eth_mask, 0, sizeof(eth_mask));

	pattern[0].type = RTE_FLOW_ITEM_TYPE_ETH;
	if (r->match_mac) {
		memcpy(eth_spec.hdr.dst_addr.addr_bytes, r->mac, 6);
		memset(eth_mask.hdr.dst_addr.addr_bytes, 0xff, 6);
		pattern[0].spec = &eth_spec;
		pattern[0].mask = &eth_mask;
	}
	switch (r->kind) {
	case PN_FLOW_IPV4_DST:
		memset(&ip4_spec, 0, sizeof(ip4_spec));
		memset(&ip4_mask, 0, sizeof(ip4_mask));
		memcpy(&ip4_spec.hdr.dst_addr, r->addr, 4);
		ip4_mask.hdr.dst_addr = 0xffffffff;
		pattern[1].type = RTE_FLOW_ITEM_TYPE_IPV4;
		pattern[1].spec = &ip4_spec;
		pattern[1].mask = &ip4_mask;
		break;
	case PN_FLOW_IPV6_DST:
		memset(&ip6_spec, 0, sizeof(ip6_spec));
		memset(&ip6_mask, 0, sizeof(ip6_mask));
		memcpy(ip6_spec.hdr.dst_addr, r->addr, 16);
		memset(ip6_mask.hdr.dst_addr, 0xff, 16);
		pattern[1].type = RTE_FLOW_ITEM_TYPE_IPV6;
		pattern[1].spec = &ip6_spec;
		pattern[1].mask = &ip6_mask;
		break;
	case PN_FLOW_ARP_TPA:
		memset(&arp_spec, 0, sizeof(arp_spec));
		memset(&arp_mask, 0, sizeof(arp_mask));
		memcpy(&arp_spec.tpa, r->addr, 4);
		arp_mask.tpa = 0xffffffff;
		pattern[1].type = RTE_FLOW_ITEM_TYPE_ARP_ETH_IPV4;
		pattern[1].spec = &arp_spec;
		pattern[1].mask = &arp_mask;
		break;
	default:
		snprintf(msg, len, "unknown rule kind %d", r->kind);
		return -EINVAL;
	}
	pattern[2].type = RTE_FLOW_ITEM_TYPE_END;

	struct rte_flow_action actions[2];
	struct rte_flow_action_queue queue = {.index = 0};
	uint16_t queues[RTE_MAX_QUEUES_PER_PORT];
	struct rte_flow_action_rss rss;
	memset(actions, 0, sizeof(actions));
	if (r->nb_queues > 1) {
		for (uint16_t i = 0; i < r->nb_queues && i < RTE_MAX_QUEUES_PER_PORT; i++)
			queues[i] = i;
		memset(&rss, 0, sizeof(rss));
		rss.func = RTE_ETH_HASH_FUNCTION_DEFAULT;
		rss.types = r->rss_hf;
		rss.key_len = r->rss_key_len;
		rss.key = r->rss_key;
		rss.queue_num = r->nb_queues;
		rss.queue = queues;
		actions[0].type = RTE_FLOW_ACTION_TYPE_RSS;
		actions[0].conf = &rss;
	} else {
		actions[0].type = RTE_FLOW_ACTION_TYPE_QUEUE;
		actions[0].conf = &queue;
	}
	actions[1].type = RTE_FLOW_ACTION_TYPE_END;

	struct rte_flow_error e;
	memset(&e, 0, sizeof(e));
	*out = rte_flow_create(port, &attr, pattern, actions, &e);
	if (*out == NULL) {
		flow_msg(&e, msg, len);
		return rte_errno ? -rte_errno : -EINVAL;
	}
	return 0;
}

int pn_flow_flush(uint16_t port)
{
	struct rte_flow_error e;
	return rte_flow_flush(port, &e);
}

struct pn_rxq *pn_rxq_new(uint16_t port, uint16_t queue, uint16_t max_segs)
{
	struct pn_rxq *q = calloc(1, sizeof(*q));
	if (q == NULL)
		return NULL;
	q->segs = calloc((size_t)PN_RX_BURST * max_segs, sizeof(struct pn_seg));
	if (q->segs == NULL) {
		free(q);
		return NULL;
	}
	q->port = port;
	q->queue = queue;
	q->max_segs = max_segs;
	return q;
}

void pn_rxq_free(struct pn_rxq *q)
{
	if (q == NULL)
		return;
	if (q->n > 0)
		rte_pktmbuf_free_bulk(q->mbufs, q->n);
	free(q->segs);
	free(q);
}

uint16_t pn_rx_burst(struct pn_rxq *q)
{
	uint16_t n = rte_eth_rx_burst(q->port, q->queue, q->mbufs, PN_RX_BURST);
	for (uint16_t i = 0; i < n; i++) {
		struct rte_mbuf *m = q->mbufs[i];
		struct pn_seg *seg = &q->segs[(size_t)i * q->max_segs];
		uint16_t k = 0;
		struct rte_mbuf *s = m;
		for (; s != NULL && k < q->max_segs; s = s->next, k++) {
			seg[k].addr = rte_pktmbuf_mtod(s, void *);
			seg[k].len = s->data_len;
		}
		q->nb_segs[i] = s == NULL ? k : 0;
		q->pkt_len[i] = m->pkt_len;
		switch (m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) {
		case RTE_MBUF_F_RX_L4_CKSUM_GOOD:
			q->l4_csum[i] = 1;
			break;
		case RTE_MBUF_F_RX_L4_CKSUM_BAD:
			q->l4_csum[i] = 2;
			break;
		case RTE_MBUF_F_RX_L4_CKSUM_NONE:
			q->l4_csum[i] = 3;
			break;
		default:
			q->l4_csum[i] = 0;
		}
	}
	q->n = n;
	return n;
}

void pn_rx_release(struct pn_rxq *q, uint16_t from, uint16_t count)
{
	if (count > 0)
		rte_pktmbuf_free_bulk(&q->mbufs[from], count);
	if (from + count >= q->n)
		q->n = 0;
}

struct pn_txq *pn_txq_new(uint16_t port, uint16_t queue, struct rte_mempool *pool, uint16_t stash_cap)
{
	struct pn_txq *q = calloc(1, sizeof(*q));
	if (q == NULL)
		return NULL;
	q->port = port;
	q->queue = queue;
	q->pool = pool;
	q->room = rte_pktmbuf_data_room_size(pool) - RTE_PKTMBUF_HEADROOM;
	q->stash_cap = stash_cap > PN_TX_STASH ? PN_TX_STASH : stash_cap;
	pn_tx_refill(q);
	return q;
}

void pn_txq_free(struct pn_txq *q)
{
	if (q == NULL)
		return;
	if (q->stash_n > 0)
		rte_pktmbuf_free_bulk(q->stash, q->stash_n);
	free(q);
}

void pn_tx_refill(struct pn_txq *q)
{
	unsigned want = q->stash_cap - q->stash_n;
	unsigned try = want;
	while (try > 0 && q->stash_n < q->stash_cap) {
		if (rte_pktmbuf_alloc_bulk(q->pool, &q->stash[q->stash_n], try) != 0) {
			try /= 2;
			continue;
		}
		for (unsigned i = q->stash_n; i < q->stash_n + try; i++)
			q->stash_addr[i] = rte_pktmbuf_mtod(q->stash[i], void *);
		q->stash_n += try;
		try = q->stash_cap - q->stash_n;
	}
	if (q->stash_n < q->stash_cap)
		q->alloc_failures++;
}

uint16_t pn_tx_send(struct pn_txq *q, uint16_t nb_frames, uint16_t nb_mbufs)
{
	uint16_t k = 0;
	int offloads = 0;
	for (uint16_t i = 0; i < nb_frames; i++) {
		const struct pn_txmeta *md = &q->meta[i];
		struct rte_mbuf *head = q->stash[k], *prev = NULL;
		uint32_t left = md->len;
		for (uint16_t s = 0; s < md->nb_segs; s++) {
			struct rte_mbuf *m = q->stash[k++];
			m->data_len = left < q->room ? left : q->room;
			left -= m->data_len;
			if (prev != NULL)
				prev->next = m;
			prev = m;
		}
		head->nb_segs = md->nb_segs;
		head->pkt_len = md->len;
		head->ol_flags = md->ol_flags;
		head->l2_len = md->l2_len;
		head->l3_len = md->l3_len;
		head->l4_len = md->l4_len;
		head->tso_segsz = md->tso_segsz;
		offloads |= md->ol_flags != 0;
		q->pkts[i] = head;
	}
	uint16_t ready = nb_frames;
	if (offloads)
		ready = rte_eth_tx_prepare(q->port, q->queue, q->pkts, nb_frames);
	uint16_t sent = rte_eth_tx_burst(q->port, q->queue, q->pkts, ready);
	if (sent < nb_frames)
		rte_pktmbuf_free_bulk(&q->pkts[sent], nb_frames - sent);
	q->stash_n -= nb_mbufs;
	memmove(&q->stash[0], &q->stash[nb_mbufs], q->stash_n * sizeof(q->stash[0]));
	memmove(&q->stash_addr[0], &q->stash_addr[nb_mbufs], q->stash_n * sizeof(q->stash_addr[0]));
	pn_tx_refill(q);
	return sent;
}
