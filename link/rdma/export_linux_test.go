//go:build rdma && linux && cgo

package rdma

// For the external tests (package rdma_test), which import dialer and
// listener: those import this package, so an internal test cannot.
var (
	HostHasVerbs = hostHasVerbs
	HWStack      = hwStack
)
