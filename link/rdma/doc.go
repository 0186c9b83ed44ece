// Package rdma is a polarnet link over an RDMA NIC's verbs interface: raw
// Ethernet frames through raw packet queue pairs (IBV_QPT_RAW_PACKET), with
// no kernel on the data path and no DPDK. README.md says which NICs and
// drivers it is for and how to check a host.
//
// # Builds
//
// The verbs layer is cgo over libibverbs, built only with the rdma build
// tag (go build -tags rdma, cgo on, Linux, libibverbs-dev installed); that
// build also registers the link for POLARNET_LINK=rdma (import the package).
// Without the tag New returns an error wrapping link.ErrNotSupported
// that says how to build it. Discovery (LookupNetdev, LookupDevice,
// Candidates) is pure Go over sysfs with github.com/Mellanox/rdmamap and
// works in every build.
//
// # What New builds
//
//   - A protection domain and one memory region, mapped and registered at
//     New, carved into frame buffers: per queue, RxRing receive buffers and
//     TxRing send buffers of MTU+18 bytes (rounded up to 64).
//   - Per queue (shard): a completion channel, a receive completion queue
//     on it, a send completion queue, and a raw packet QP whose send queue
//     the queue's WriteBurst feeds. With more than one queue and a device
//     that hashes (mlx5), each queue also gets a receive work queue
//     (ibv_create_wq); an indirection table spreads over them
//     (ibv_create_rwq_ind_table) and one hashing QP per traffic class
//     (TCP and UDP over IPv4 and IPv6: ibv_create_qp_ex with rx_hash_conf,
//     Toeplitz) receives through it; what is not hashed (ARP, ICMP,
//     neighbour discovery) goes to queue 0. Without RSS, queue 0's QP
//     receives everything and the engine hands frames to their owners.
//   - Flow rules (ibv_create_flow) that steer only the link's traffic to
//     user space: frames to its addresses when it shares the interface's
//     MAC with the kernel (the default), every frame to its MAC when it has
//     one of its own; broadcast ARP and IPv6 solicited-node multicast are
//     copied to the link without being taken from the kernel
//     (IBV_FLOW_ATTR_FLAGS_DONT_TRAP). Everything else stays with the
//     kernel, whose interface keeps working.
//
// # Buffers and bursts
//
// ReadBurst polls the receive completion queue for up to a burst of
// completions, copies each frame from its registered buffer into the
// engine's buffer (the one copy the link contract allows) and posts the
// buffers again in one call. WriteBurst copies each frame into a free send
// buffer, completing a partial checksum on the way (CapTXChecksum), and
// posts the burst in one call, signaling every 16th work request and the
// last; a send completion frees its buffer and every one posted before it.
// Without a free send buffer (or when the send queue is full) WriteBurst
// accepts fewer frames, as a full ring does. CapRXChecksum is claimed when
// the device verifies checksums (IBV_RAW_PACKET_CAP_IP_CSUM); frames it
// marks IBV_WC_IP_CSUM_OK arrive ChecksumValid. There is no GSO yet.
//
// A failed completion puts a queue in the error state: ReadBurst (the one
// that notices it, else the next) moves it through reset back to ready, takes every buffer back and posts
// the receive buffers again (Stats counts the restarts). Close moves every
// queue to the error state, collects what the device flushes, takes every
// buffer back and destroys everything in order.
//
// # Waiting
//
// WaitRead arms the receive completion queue's notification, polls once
// more (a completion that came before the arming notifies nobody), and then
// parks the goroutine in the Go netpoller on a duplicate of the completion
// channel's non-blocking descriptor, never in a blocking system call.
// Interrupt expires a read deadline on that descriptor.
//
// # Testing without hardware
//
// The bookkeeping (queue.go) reaches the device only through a small
// interface (verbs.go: post receives and sends, poll completions, arm,
// wait, stop, restart). The cgo layer implements it over libibverbs; the
// tests implement it with a fake device that applies the flow rules and the
// RSS spread, so the link suite, fault injection (completion errors, full
// send queues, refused receive buffers) and two polarnet stacks talking TCP
// run on the bookkeeping on any machine.
package rdma
