// Package dpdk is a polarnet link over a DPDK port: a NIC bound to vfio-pci,
// a bifurcated mlx5 port, or a virtual device (net_af_packet, net_tap,
// net_memif), with one RX/TX queue pair per shard.
//
// The link is cgo and needs the build tag dpdk and DPDK 22.11's headers and
// libraries (apt-get install libdpdk-dev pkg-config). Without the tag, or
// without cgo, New returns an error wrapping link.ErrNotSupported that
// says so, and the package stays pure Go.
//
// EAL initialises once per process, through a small C shim of the
// package's own (InitEAL, or the first New), from EALConfig. Each queue
// receives a burst in one cgo call and frees it in one more, copying
// frames straight from mbuf memory into the engine's buffers in between;
// it sends a burst in one cgo call, copying frames into mbufs allocated
// ahead. Checksum offloads and TSO are used, and claimed, when the PMD
// reports them; RSS with a known Toeplitz key makes the link a
// link.Steerer when its queue choice can be predicted; waits park in
// the Go netpoller on the PMD's receive interrupts, a timer, or (between
// two polarnet ends of a net_memif link) a doorbell. rte_flow isolated mode
// leaves a bifurcated NIC's other traffic with the kernel.
//
// In a build with -tags dpdk, importing the package (dialer and listener
// do) registers the link for POLARNET_LINK=dpdk; without the tag it is a
// pure-Go stub that says how to build with DPDK.
//
// README.md describes the production setup (hugepages, vfio-pci, isolated
// cores, NICs), the configuration of each virtual device, the PMD quirks the
// link works around, and the measurements.
package dpdk
