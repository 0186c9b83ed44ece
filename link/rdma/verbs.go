package rdma

import "net"

// This file is the seam between the link's bookkeeping (queue.go: posting
// receives, reaping completions, recycling buffers, batching sends) and the
// verbs calls. The cgo layer (verbs_linux.go, build tag rdma) implements it
// over libibverbs; the tests implement it with a fake device, so every line
// of the bookkeeping runs without hardware.

// device is an opened RDMA device: what the bookkeeping asks of it.
type device interface {
	// caps reports what the device can do for the link.
	caps() deviceCaps
	// setup builds the link's resources as p describes them: the memory
	// region (p.buffers() buffers of p.frameSize bytes, back to back,
	// registered for local write), one queuePair per queue, the RSS
	// indirection table and hashing QPs, and the flow rules. It returns the
	// region, whose buffer i the work requests name by index.
	setup(p *setupPlan) (region []byte, qps []queuePair, err error)
	// close destroys everything setup built and the device itself, after
	// the bookkeeping has stopped the queues and reaped what it could. The
	// region must not be used afterwards. It is called once, also when
	// setup failed.
	close() error
}

// deviceCaps are the device's limits and features the plan depends on.
type deviceCaps struct {
	// maxQueueDepth bounds the work requests of one queue (max_qp_wr) and
	// maxCQE the entries of a completion queue.
	maxQueueDepth, maxCQE int
	// rss reports raw packet QPs hashing with Toeplitz over IPv4 and IPv6
	// addresses and TCP and UDP ports; maxRSSTable bounds the indirection
	// table and maxWQs the receive work queues.
	rss         bool
	maxRSSTable int
	maxWQs      int
	// rxChecksum reports that completions carry IBV_WC_IP_CSUM_OK
	// (IBV_RAW_PACKET_CAP_IP_CSUM).
	rxChecksum bool
}

// queuePair is one queue of the link on the device: a receive work queue
// with its completion queue (and the completion channel WaitRead sleeps on),
// and a raw packet QP's send queue with its completion queue.
//
// The bookkeeping serialises every method but wakeRecv, which may be called
// at any time from any goroutine, even after close.
type queuePair interface {
	// postRecv posts one receive work request per buffer, in order, and
	// returns how many it posted; an error tells why it stopped short.
	postRecv(bufs []uint32) (int, error)
	// pollRecv reaps up to len(wcs) receive completions, oldest first.
	pollRecv(wcs []completion) (int, error)
	// postSend posts send work requests, in order, and returns how many it
	// posted; an error tells why it stopped short.
	postSend(wrs []sendWR) (int, error)
	// pollSend reaps up to len(wcs) send completions, oldest first: one
	// for each signaled work request (and, in the error state, perhaps for
	// unsignaled ones).
	pollSend(wcs []completion) (int, error)

	// armRecv asks for a notification when the next receive completion
	// arrives (ibv_req_notify_cq). The caller polls once more afterwards:
	// a completion that arrived before the request notifies nobody.
	armRecv() error
	// waitRecv parks the goroutine (in the Go netpoller, never in a
	// blocking system call) until an armed notification fires or wakeRecv
	// is called; it returns at once if interrupted reports true after it
	// has taken note of wakeRecv calls to come.
	waitRecv(interrupted func() bool) error
	// wakeRecv makes a waitRecv in progress return.
	wakeRecv()

	// stop moves the receive and send queues to the error state: the device
	// completes every outstanding work request with a flush status.
	stop() error
	// restart moves stopped (or failed) queues back to ready through reset;
	// from the reset on, the device owns none of the queue's buffers.
	restart() error
}

// completion is a work completion, reduced to what the bookkeeping uses.
type completion struct {
	id     uint64 // the work request's buffer index
	length uint32 // bytes received (receive completions)
	status wcStatus
	code   uint32 // the verbs status (ibv_wc_status), for messages
	csumOK bool   // the device verified the IP and L4 checksums
}

// wcStatus is a completion's outcome.
type wcStatus uint8

const (
	wcOK      wcStatus = iota
	wcFlushed          // completed because the queue is in the error state (IBV_WC_WR_FLUSH_ERR)
	wcError            // failed: code says why; the queue is now in the error state
)

// sendWR is a send work request: a frame of length bytes in buffer buf.
type sendWR struct {
	buf      uint32
	length   uint32
	signaled bool // ask for a completion (IBV_SEND_SIGNALED)
}

// setupPlan is what the bookkeeping asks a device to build.
type setupPlan struct {
	port      int // the device port, 1-based
	queues    int
	rxDepth   int // receive buffers and work requests per queue
	txDepth   int // send buffers and work requests per queue
	frameSize int // bytes per buffer
	// rss spreads received flows over the queues; nil when queue 0
	// receives everything (one queue, or a device without RSS).
	rss   *rssPlan
	flows []flowRule
	// mac is the link's address (the flows' destination).
	mac net.HardwareAddr
}

// rssPlan is the spread over the queues: the Toeplitz key and the
// indirection table (entry i holds a queue index; a power of two long).
type rssPlan struct {
	key   []byte
	table []int
}

// buffers is the region's size in buffers: each queue's receive buffers,
// then its send buffers.
func (p *setupPlan) buffers() int { return p.queues * (p.rxDepth + p.txDepth) }

// rxBuf and txBuf are the index of queue q's receive and send buffer i.
func (p *setupPlan) rxBuf(q, i int) uint32 { return uint32(q*(p.rxDepth+p.txDepth) + i) }
func (p *setupPlan) txBuf(q, i int) uint32 { return uint32(q*(p.rxDepth+p.txDepth) + p.rxDepth + i) }
