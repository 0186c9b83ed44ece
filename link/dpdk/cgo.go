//go:build dpdk && linux && cgo

package dpdk

// #cgo pkg-config: libdpdk
// #cgo LDFLAGS: -lrte_bus_vdev
// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"fmt"
	"syscall"
)

// errnoError turns a negative errno returned by the shim into an error.
func errnoError(ret C.int) error {
	if ret >= 0 {
		return nil
	}
	return syscall.Errno(-ret)
}

// rteError describes a negative errno from DPDK, in DPDK's words where they
// differ from the C library's.
func rteError(op string, ret C.int) error {
	if ret >= 0 {
		return nil
	}
	errno := syscall.Errno(-ret)
	msg := C.GoString(C.pn_strerror(C.int(-ret)))
	if msg == errno.Error() || msg == "" {
		return fmt.Errorf("%s: %w", op, errno)
	}
	return fmt.Errorf("%s: %w (%s)", op, errno, msg)
}
