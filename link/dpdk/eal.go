//go:build dpdk && linux && cgo

package dpdk

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"unsafe"
)

var eal struct {
	sync.Mutex
	done bool     // rte_eal_init was called
	args []string // with these arguments
	err  error    // and failed so
}

// InitEAL initialises DPDK's Environment Abstraction Layer with c, unless it
// is initialised already. EAL initialises once per process: a later call
// with the arguments of the first returns its result; a call with other
// arguments fails, and so does every call after rte_eal_init failed, since
// EAL cannot be initialised again after most failures (the hugepage checks
// InitEAL makes first are the exception: it has not called EAL then).
//
// New calls it with Config.EAL. Call it first when several links share one
// configuration, or to report EAL's failure before opening any link.
//
// rte_eal_init pins the calling thread to the first lcore: InitEAL calls it
// on a locked OS thread that ends with the call, so no goroutine runs pinned.
// Its failures are returned as *EALError, never as a crash.
func InitEAL(c EALConfig) error {
	args, err := c.Args()
	if err != nil {
		return err
	}
	eal.Lock()
	defer eal.Unlock()
	if eal.done {
		if eal.err != nil {
			return eal.err
		}
		if !c.isZero() && !slices.Equal(args, eal.args) {
			return fmt.Errorf("dpdk: EAL is initialised already with %q; it initialises once per process and cannot take %q", eal.args[1:], args[1:])
		}
		return nil
	}
	if err := checkHugepages(&c); err != nil {
		return err
	}
	eal.done, eal.args = true, args
	eal.err = initOnOwnThread(args)
	return eal.err
}

// pciBus reports whether EAL runs with its PCI bus (not --no-pci), so that
// a PCI device may be probed.
func pciBus() bool {
	eal.Lock()
	defer eal.Unlock()
	return eal.done && eal.err == nil && !slices.Contains(eal.args, "--no-pci")
}

// initOnOwnThread runs rte_eal_init on a fresh OS thread that is never
// unlocked: when the goroutine returns, the Go runtime ends the thread, and
// with it the CPU affinity EAL gave it.
func initOnOwnThread(args []string) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		done <- callEALInit(args)
	}()
	return <-done
}

func callEALInit(args []string) error {
	// EAL may keep pointers into argv (it parses with getopt and stores
	// some arguments): the strings stay allocated for the process's life.
	argv := C.malloc(C.size_t(len(args)+1) * C.size_t(unsafe.Sizeof(uintptr(0))))
	cargs := unsafe.Slice((**C.char)(argv), len(args)+1)
	for i, a := range args {
		cargs[i] = C.CString(a)
	}
	cargs[len(args)] = nil
	var rteErr C.int
	ret := C.pn_eal_init(C.int(len(args)), (**C.char)(argv), &rteErr)
	if ret < 0 {
		return &EALError{Args: slices.Clone(args), Errno: syscall.Errno(rteErr)}
	}
	return nil
}
