// Package impair is netem in user space: a link.Link decorator that
// delays, jitters, drops, reorders, duplicates and corrupts frames, limits
// the rate and clamps the TCP MSS, in both directions; and a Relay that
// joins two links, so that traffic between two kernel stacks (two TAP
// devices in two network namespaces, say) crosses the very same impairment
// as traffic between the kernel and a polarnet stack.
//
// It exists because tc-netem is often unavailable (kernels built without
// it, containers without CAP_NET_ADMIN) and because a user-space
// impairment is seeded and reproducible: the same Config and Seed and the
// same frames in the same order get the same decisions (lost, duplicated,
// corrupted and where, delayed by how much, held back to be overtaken),
// whatever the timing. Timing still shapes what the decisions lead to: a
// frame held back for reordering leaves alone once ReorderHold passes, and
// a full queue (Limit) drops.
//
// # Using it
//
// Wrap the link a stack runs on:
//
//	link, _ := tap.New(tap.Config{DisableOffloads: true})
//	imp := impair.New(link, impair.Symmetric(impair.Impairment{
//		Delay: 25 * time.Millisecond, Loss: 0.01,
//	}, 1))
//	st, _ := polarnet.New(polarnet.Config{Link: imp, ...})
//
// Egress impairs what the engine sends, Ingress what it receives. To impair
// a path between two links that are not a stack's (a kernel↔kernel
// reference run), join them with NewRelay and wrap one of them:
//
//	r, _ := impair.NewRelay(tapA, impair.New(tapB, cfg))
//	defer r.Close()
//
// # Frames, offloads and checksums
//
// Impairments apply per frame as the wrapped link delivers it. A link with
// offloads (a TAP device with its virtio-net header) exchanges TCP frames of
// up to 64 KiB that the kernel segments or coalesced: dropping one drops
// dozens of wire packets. For packet-level fidelity, open such links without
// offloads (tap.Config.DisableOffloads), so every frame is one wire packet.
//
// Corruption flips one random bit of the IP packet (never the Ethernet
// header), and the receiver must detect it as a real NIC's receiver would:
//   - a received frame marked ChecksumValid (whose checksum the kernel
//     verified, or left partial because it never crossed a wire) gets its
//     transport checksum completed in software before the flip and is
//     handed on without the mark, so the engine verifies it;
//   - a sent frame asking for TxOffload.NeedsChecksum gets its checksum
//     completed in software before the flip and is sent without the
//     request, so the far end sees a wrong checksum. A GSO frame cannot be
//     corrupted that way (its segments' checksums are computed after the
//     flip), so New hides CapGSO from the engine when Egress.Corrupt is
//     set, and GSO frames that reach the decorator anyway (after Set) are
//     never corrupted.
//
// ClampMSS rewrites the MSS option of TCP SYNs passing through and fixes
// their checksum (a partial checksum needs no fixing), as a router with
// MSS clamping does.
//
// # Buffers and goroutines
//
// Frames that wait (delay, rate, reordering) are copied into pooled buffers:
// the engine's TxFrame segments are only valid during WriteBurst and its
// receive buffers only during ReadBurst. An impairment that is all zero
// costs nothing: frames pass through without a copy. Each queue pair runs
// one goroutine that sends delayed frames when they are due; received
// frames wait in the decorator and WaitRead wakes when the first is due.
package impair
