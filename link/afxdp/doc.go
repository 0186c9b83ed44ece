// Package afxdp is a polarnet link over AF_XDP sockets, in pure Go
// (golang.org/x/sys/unix and github.com/cilium/ebpf, no cgo): the kernel's
// own fast path, which needs no special driver binding and leaves the
// interface to the kernel for everything polarnet does not claim.
//
//	l, err := afxdp.New(afxdp.Config{
//		Interface: "eth1",
//		Addresses: []netip.Prefix{netip.MustParsePrefix("198.18.0.2/24")},
//	})
//	st, err := polarnet.New(polarnet.Config{Link: l, Addrs: ...same...})
//
// POLARNET_LINK=afxdp selects it from the environment (see register.go's
// options).
//
// # Sockets, UMEM and rings
//
// Each queue pair is one AF_XDP socket bound to the interface's queue of
// the same number, with a UMEM of its own (Config.Frames frames of
// Config.FrameSize bytes) and the four rings mapped at the offsets the
// kernel gives (XDP_MMAP_OFFSETS). The first RingSize frames belong to RX:
// they sit in the fill ring until the kernel hands them back on the RX ring,
// and ReadBurst copies each into the engine's buffer and puts the frame
// straight back on the fill ring, so nothing the link owns outlives the
// call. The other frames belong to TX: WriteBurst copies a frame's gather
// list into a free one, puts it on the TX ring and kicks the kernel;
// completed frames return to the free list at the next WriteBurst. Sockets
// are bound with XDP_USE_NEED_WAKEUP: in copy mode the kernel sends only
// when kicked (sendto with MSG_DONTWAIT, repeated while the kernel's budget
// of frames per call stops it short), and the fill ring is kicked (recvfrom)
// only when a zero-copy driver asks for it. WaitRead parks the goroutine in
// the Go netpoller on a duplicate of the socket, never in a blocking system
// call.
//
// Binding asks for zero-copy first (Config.ZeroCopy) and falls back to copy
// mode; veth has no zero-copy. A queue another socket released a moment ago
// is busy (EBUSY) for a few hundred milliseconds while the kernel frees it:
// New retries for Config.BusyTimeout.
//
// # The XDP program
//
// The link loads its own XDP program, assembled with cilium/ebpf's asm
// package (no C compiler needed). It reads the Ethernet, ARP, IPv4 and IPv6
// headers and compares addresses with Config.Addresses, compiled in as
// constants; Config.Filter says what it redirects: TCP, UDP and ICMP for
// those addresses with ARP and neighbour solicitations for them
// (FilterStack, the default), TCP alone with ARP and neighbour discovery
// (FilterTCP), or every frame (FilterAll). Everything else goes on to the
// kernel, so the host keeps its SSH, DNS and other traffic on its own
// addresses.
//
// A frame the link takes goes to the socket of the RX queue it arrived on
// (bpf_redirect_map on the XSK map, keyed by rx_queue_index, falling back to
// the kernel when that queue has no socket). It cannot go anywhere else: a
// socket in copy or driver mode receives only from the queue it is bound to,
// and a redirect to another queue's socket fails. The program therefore
// does not steer flows by port, and ARP and neighbour discovery reach the
// socket of whichever queue they arrive on. Which queue a flow arrives on is
// up to the device: a NIC's RSS hash, a veth's transmit queue choice on the
// peer in native mode, always queue 0 in generic mode on veth. None of these
// can be made to follow link.PortSteering from here, so the link does
// not implement link.Steerer and the engine steers in software.
//
// The program is attached in native mode where the driver has it, in generic
// mode otherwise (Config.Mode); Mode reports which. A BPF link holds the
// attachment, so the kernel detaches the program when the link is closed and
// also when the process dies, however it dies. Kernels without BPF links
// for XDP (before 5.9) get a netlink attachment, which a crash leaves behind.
// Programs are named "pnxdp_" and the loading process's ID: New detaches one
// whose process is gone before it attaches its own, and refuses (EBUSY) an
// interface whose polarnet program belongs to a live process, or that has
// someone else's program.
//
// # Modes on veth
//
// Native mode on veth runs the program in the veth's NAPI poll; attaching it
// makes the kernel turn off GSO on the peer (so the peer's TCP sends
// MTU-sized frames) and requires the peer's MTU to fit a page, unless the
// program takes multi-buffer frames, as it does when the MTU needs them
// (see Frame sizes). Generic mode
// sees the peer's socket buffers as the stack would: with TSO on at the
// peer (the default) TCP arrives in super-frames of up to 64 KiB, larger
// than any UMEM frame, which the kernel drops; TCP from such a peer stalls.
// ModeAuto picks native on veth. Generic mode suits devices without native
// XDP whose frames come from a wire (and GRO off).
//
// # Checksums
//
// Frames from a kernel peer on veth arrive checksum-partial: the kernel
// never completes the checksums of CHECKSUM_PARTIAL packets that cross a
// veth, and neither native nor generic XDP completes them before the
// redirect (measured on Linux 6.18: all TCP frames of a kernel peer with
// checksum offload on carry only the pseudo-header sum in their checksum
// field, in both modes). AF_XDP passes no metadata that says so. The link
// therefore claims CapRXChecksum and checks every TCP and UDP frame itself
// (one pass over a frame it has just copied, so in cache): a correct
// checksum is marked ChecksumValid; on veth, whose frames come from the
// local kernel's memory, a checksum field holding exactly the pseudo-header
// sum is taken for a partial checksum and marked ChecksumValid as well
// (a corrupted frame would have to hit that one value of 65536); anything
// else is left unmarked for the engine to verify and drop. Devices other
// than veth get no such allowance. With Config.DisableOffloads the link
// claims no checksum offload and completes a partial checksum in the frame
// instead, so the engine verifies every frame and sees it as on a wire.
//
// On TX the link claims CapTXChecksum. Where the kernel accepts TX metadata
// (Linux 6.11 and later) and the socket is in copy mode, a checksum-partial
// frame carries a checksum request (XDP_TX_METADATA with
// XDP_TXMD_FLAGS_CHECKSUM): the kernel builds a CHECKSUM_PARTIAL socket
// buffer, which a veth hands to its peer unfinished (the peer trusts it, as
// it trusts its own) and a NIC completes in hardware or the kernel in
// software, so the link computes nothing. Elsewhere (zero-copy, whose
// drivers may ignore the request, or older kernels) the link completes the
// checksum in software while the frame is in UMEM.
//
// # Frame sizes
//
// A UMEM frame holds FrameSize-256 bytes of a frame (the kernel keeps 256
// bytes of headroom): 3840 by default, an MTU of 3826. Where the
// interface's MTU needs more (a jumbo MTU of 9000, say), the link uses
// multi-buffer AF_XDP (XDP_USE_SG, Linux 6.6 and later): a frame spans up
// to 16 UMEM frames, one descriptor each, all but the last marked
// XDP_PKT_CONTD, in both directions, and the XDP program is loaded as one
// that handles such frames (BPF_F_XDP_HAS_FRAGS). ReadBurst joins the parts
// into the engine's buffer with the same one copy; WriteBurst spreads a
// frame over as many free UMEM frames, with its TX metadata in front of the
// first, and completes a checksum in software across them. New refuses an
// interface whose frames would span more than 16.
//
// # Limits
//
// The link does not segment (no CapGSO). UMEM is locked memory: without
// CAP_IPC_LOCK it counts against RLIMIT_MEMLOCK.
package afxdp
