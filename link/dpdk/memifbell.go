package dpdk

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// A doorbell lets a polarnet process that sends on a net_memif link wake
// the polarnet process at the other end when that one sleeps. DPDK 22.11's
// memif PMD keeps memif's own interrupts masked and offers no receive
// interrupts, so a waiting poller could only sleep and look again, and a
// sleep on a VM lasts far longer than it asks (docs/benchmarks.md). With
// the doorbell, an idle end sleeps in the netpoller until its peer sends:
//
//   - a small shared file holds, per end and queue, a flag meaning "asleep,
//     ring me";
//   - each end binds a Unix datagram socket per queue, its bell;
//   - a waiting end sets its flag, looks at the ring once more, and parks
//     on its bell (and a timer, PollIntervalMax, for peers without bells);
//   - a sending end, after each burst, swaps its peer's flag from "asleep"
//     to "rung" and, if it did, sends one byte to the peer's bell.
//
// Setting the flag before the last look and swapping it after the send
// (both full barriers) means a frame is either seen by the look or rung
// for. A peer that is not polarnet has no bell: sends to it fail quietly
// and the timer bounds its partner's sleeps as without doorbells.
//
// memifBellPaths derives the paths from the memif device arguments: next
// to the memif socket when it is a file (socket-abstract=no, which
// namespaces need), in the abstract namespace and /dev/shm otherwise.
type memifBellPaths struct {
	shm        string
	bell       func(role string, queue int) string // Unix socket address
	role, peer string
}

// memifBells returns the doorbell paths for a net_memif device's
// arguments.
func memifBells(args string) memifBellPaths {
	socket, abstract, role, id := "/run/memif.sock", true, "client", "0"
	for _, kv := range strings.Split(args, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		switch k {
		case "socket":
			socket = v
		case "socket-abstract":
			abstract = !strings.Contains(v, "no")
		case "role":
			if strings.Contains(v, "server") || strings.Contains(v, "master") {
				role = "server"
			}
		case "id":
			id = v
		}
	}
	p := memifBellPaths{role: role, peer: "client"}
	if role == "client" {
		p.peer = "server"
	}
	if abstract {
		sum := sha256.Sum256([]byte(socket + "\x00" + id))
		name := "polarnet-memif-" + hex.EncodeToString(sum[:8])
		p.shm = "/dev/shm/" + name
		p.bell = func(role string, queue int) string { return fmt.Sprintf("@%s-%s-%d", name, role, queue) }
		return p
	}
	base := fmt.Sprintf("%s.%s.pnbell", socket, id)
	p.shm = base
	p.bell = func(role string, queue int) string { return fmt.Sprintf("%s-%s-%d", base, role, queue) }
	return p
}

// memifBellFlag returns the offset of an end's flag for a queue in the
// shared file: a cache line each, servers first.
func memifBellFlag(role string, queue int) int {
	off := queue * 64
	if role == "client" {
		off += memifBellQueues * 64
	}
	return off
}

// memifBellQueues is the most queues a doorbell file has flags for
// (ETH_MEMIF_MAX_NUM_Q_PAIRS), memifBellSize the file's size.
const (
	memifBellQueues = 256
	memifBellSize   = 2 * memifBellQueues * 64
)
