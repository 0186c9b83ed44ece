// The C side of the DPDK link: everything polarnet asks of DPDK goes
// through these functions, so that Go never touches DPDK's inline functions,
// bitfields or unions, and the data path costs one cgo call per burst.
//
// Functions return 0 (or a count) on success and a negative errno on
// failure unless they say otherwise.

#ifndef POLARNET_DPDK_SHIM_H
#define POLARNET_DPDK_SHIM_H

#include <stdint.h>
#include <stddef.h>

struct rte_mempool;
struct rte_mbuf;
struct rte_flow;

#define PN_RX_BURST 32  // frames per RX burst
#define PN_TX_BURST 64  // frames per TX burst
#define PN_TX_STASH 256 // mbufs a TX queue may allocate ahead
#define PN_MAX_KEY 64   // longest RSS key

// EAL.
int pn_eal_init(int argc, char **argv, int *rte_err);
const char *pn_strerror(int err);

// Devices and ports.
int pn_vdev_create(const char *name, const char *args);
int pn_vdev_remove(const char *name);
int pn_dev_probe(const char *devargs);
int pn_port_by_name(const char *name, uint16_t *port);
// pn_port_list writes the names of the available ports, comma-separated.
void pn_port_list(char *buf, size_t len);

struct pn_info {
	char driver[64];
	char name[64];
	uint16_t max_rx_queues, max_tx_queues;
	uint32_t max_rx_pktlen;
	uint16_t min_mtu, max_mtu, mtu;
	uint64_t rx_offload_capa, tx_offload_capa, flow_type_rss_offloads;
	uint16_t reta_size;
	uint8_t hash_key_size;
	uint8_t mac[6];
	int32_t socket_id;
};
int pn_port_info(uint16_t port, struct pn_info *out);

struct pn_conf {
	uint16_t nb_queues;
	uint16_t nb_rxd, nb_txd; // in: wanted; out: adjusted to the PMD's limits
	uint64_t rx_offloads, tx_offloads;
	uint8_t rss;
	uint8_t rss_key_len;
	uint8_t rss_key[PN_MAX_KEY];
	uint64_t rss_hf;
	uint8_t rxq_intr;
};
int pn_port_configure(uint16_t port, struct pn_conf *c);
int pn_rxq_setup(uint16_t port, uint16_t q, uint16_t nb_rxd, uint64_t offloads, struct rte_mempool *pool);
int pn_txq_setup(uint16_t port, uint16_t q, uint16_t nb_txd, uint64_t offloads);
int pn_port_start(uint16_t port);
// pn_port_close stops and closes the port; with remove_name it then removes
// the vdev of that name, with remove_dev the (PCI) device.
int pn_port_close(uint16_t port, const char *remove_name, int remove_dev);
// pn_port_close_on_intr_thread is pn_port_close run on EAL's interrupt
// thread, waiting for it: net_memif tears a connection down there when its
// peer disconnects, and a stop on another thread at the same moment frees
// the connection's regions twice (DPDK 22.11 memif_disconnect has no lock
// around them), crashing the process or corrupting its heap.
int pn_port_close_on_intr_thread(uint16_t port, const char *remove_name, int remove_dev);
int pn_set_mtu(uint16_t port, uint16_t mtu);
int pn_set_mac(uint16_t port, const uint8_t *mac);
int pn_promiscuous(uint16_t port);
int pn_allmulticast(uint16_t port);

// pn_reta_program spreads the RETA round-robin over nb_queues and reads it
// back into reta (reta_size entries).
int pn_reta_program(uint16_t port, uint16_t reta_size, uint16_t nb_queues, uint16_t *reta);
// pn_rss_get reads the port's RSS key (into key, *key_len in/out) and types.
int pn_rss_get(uint16_t port, uint8_t *key, uint8_t *key_len, uint64_t *hf);

struct pn_link {
	uint32_t speed;
	uint8_t up, full_duplex;
};
int pn_link_get(uint16_t port, struct pn_link *out);

struct pn_stats {
	uint64_t imissed, ierrors, oerrors, rx_nombuf;
};
int pn_stats_get(uint16_t port, struct pn_stats *out);

// Receive interrupts.
int pn_rx_intr_fd(uint16_t port, uint16_t q);
int pn_rx_intr_enable(uint16_t port, uint16_t q);
int pn_rx_intr_disable(uint16_t port, uint16_t q);

// Mempools.
struct rte_mempool *pn_pool_create(const char *name, unsigned n, unsigned data_room, int socket, int *err);
void pn_pool_free(struct rte_mempool *mp);
unsigned pn_pool_in_use(struct rte_mempool *mp);

// Flow rules for isolated mode.
enum {
	PN_FLOW_IPV4_DST = 1,
	PN_FLOW_IPV6_DST = 2,
	PN_FLOW_ARP_TPA = 3,
};
struct pn_flow_rule {
	uint8_t kind;
	uint8_t match_mac;
	uint8_t mac[6];
	uint8_t addr[16];
	uint16_t nb_queues; // 1: QUEUE 0; more: RSS over 0..nb_queues-1
	uint8_t rss_key_len;
	uint8_t rss_key[PN_MAX_KEY];
	uint64_t rss_hf;
};
// Failures fill msg with rte_flow's explanation.
int pn_flow_isolate(uint16_t port, int set, char *msg, size_t len);
int pn_flow_create(uint16_t port, const struct pn_flow_rule *r, struct rte_flow **out, char *msg, size_t len);
int pn_flow_flush(uint16_t port);

// An RX queue. pn_rx_burst fills mbufs and the per-frame description Go
// copies from (segment addresses and lengths, checksum flags); pn_rx_free
// returns frames to the pool. Go reads the arrays directly.
struct pn_seg {
	void *addr;
	uint32_t len;
	uint32_t pad;
};
struct pn_rxq {
	uint16_t port, queue;
	uint16_t n;        // frames of the pending burst
	uint16_t max_segs; // segments described per frame
	uint32_t pkt_len[PN_RX_BURST];
	uint16_t nb_segs[PN_RX_BURST]; // described segments; 0: too many, drop
	uint8_t l4_csum[PN_RX_BURST];  // 0 unknown, 1 good, 2 bad, 3 none (partial)
	struct pn_seg *segs;           // PN_RX_BURST * max_segs
	struct rte_mbuf *mbufs[PN_RX_BURST];
};
struct pn_rxq *pn_rxq_new(uint16_t port, uint16_t queue, uint16_t max_segs);
void pn_rxq_free(struct pn_rxq *q);
uint16_t pn_rx_burst(struct pn_rxq *q);
void pn_rx_release(struct pn_rxq *q, uint16_t from, uint16_t count);

// A TX queue. Go copies frames into the data of stash mbufs (stash_addr),
// describes them in meta, and pn_tx_send chains, flags and sends them,
// frees what the PMD refused, and refills the stash.
struct pn_txmeta {
	uint32_t len;       // frame length
	uint16_t nb_segs;   // stash mbufs it fills, in order
	uint16_t tso_segsz; // MSS; 0: no TSO
	uint64_t ol_flags;  // RTE_MBUF_F_TX_*
	uint16_t l2_len, l3_len, l4_len;
	uint16_t pad;
};
struct pn_txq {
	uint16_t port, queue;
	uint16_t room;      // data bytes per mbuf
	uint16_t stash_n;   // stash mbufs available
	uint16_t stash_cap; // stash size to refill to
	uint16_t pad;
	uint64_t alloc_failures;
	struct rte_mempool *pool;
	void *stash_addr[PN_TX_STASH];
	struct pn_txmeta meta[PN_TX_BURST];
	struct rte_mbuf *stash[PN_TX_STASH];
	struct rte_mbuf *pkts[PN_TX_BURST];
};
struct pn_txq *pn_txq_new(uint16_t port, uint16_t queue, struct rte_mempool *pool, uint16_t stash_cap);
void pn_txq_free(struct pn_txq *q);
void pn_tx_refill(struct pn_txq *q);
// pn_tx_send sends nb_frames frames made of the first nb_mbufs stash mbufs
// and returns how many the PMD took.
uint16_t pn_tx_send(struct pn_txq *q, uint16_t nb_frames, uint16_t nb_mbufs);

#endif
