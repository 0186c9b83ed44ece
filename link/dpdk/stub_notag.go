//go:build !dpdk

package dpdk

const stubReason = "this binary was built without the dpdk build tag"
