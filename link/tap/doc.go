// Package tap is a polarnet link over a Linux TAP device, in pure Go
// (golang.org/x/sys/unix, no cgo).
//
// Each queue pair is a file descriptor of /dev/net/tun attached to the
// device; more than one makes a multi-queue device (IFF_MULTI_QUEUE), whose
// kernel side spreads received flows over the queues. The kernel side of the
// device is an ordinary interface: New configures the device (flags,
// offloads, MTU) but leaves addresses, routes and its up state to the caller,
// who may also move it to another network namespace; the link's descriptors
// keep working there.
//
// # Offloads
//
// By default every frame is preceded by a virtio-net header (IFF_VNET_HDR)
// and the device has checksum and TSO offloads (TUNSETOFFLOAD with
// TUN_F_CSUM, TUN_F_TSO4 and TUN_F_TSO6). The engine then
//   - sends TCP frames of up to 64 KiB that the kernel segments, and frames
//     with a partial checksum that the kernel completes (a partial checksum
//     must be announced in the header: the kernel drops such a frame
//     otherwise);
//   - receives the kernel's own checksum-partial and verified frames marked
//     ChecksumValid, and TCP frames of up to 64 KiB the kernel built or
//     coalesced, which is why link.Info.RxFrameSize is 64 KiB and more.
//
// The header is not part of the frames the engine sees. Config.DisableOffloads
// turns all of this off.
//
// # Floods
//
// New attaches a filter program to the device (TUNSETFILTEREBPF), which the
// kernel runs in the sender's context before a frame takes a place in a
// queue's ring. Each queue implements link.SYNShedder and
// link.StrayShedder: while the engine has a queue shed connection requests,
// or bare segments (ACKs guessing at SYN cookies) of flows it has not
// allowed, the program drops them for it but one in link.ShedSample
// (LinkStats counts them in RxShed; SYNsShed and StraysShed by kind), so
// that a flood does not fill the ring the established connections' frames
// need. The allowed flows are in an
// LRU map of 65,536 the link shares among its queues. A device that
// refuses the program works as before, without it.
//
// # Waiting
//
// The descriptors are non-blocking. ReadBurst and WriteBurst make one
// readv or writev per frame, back to back; WaitRead parks the goroutine in
// the Go netpoller, never in a blocking system call, so a poller waiting for
// frames holds no thread or P of the Go runtime. The filter program also
// counts the frames it lets into each queue's ring, in a map the link reads
// from memory (BPF_F_MMAPABLE): ReadBurst reads as many frames as are
// queued, without the readv that would find the ring empty, and makes no
// syscall at all while nothing is queued, so a spinning poller costs no
// syscalls between frames.
package tap
