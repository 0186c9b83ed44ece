//go:build dpdk && !(linux && cgo)

package dpdk

const stubReason = "this binary was built with the dpdk tag but without cgo or not for Linux (CGO_ENABLED=0?)"
