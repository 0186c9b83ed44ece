package dpdk

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/polarnet/polarnet/link"
)

var (
	// ErrNoHugepages is returned when EAL would run on hugepages but the
	// host has none free (or no hugetlbfs where one is needed). It matches
	// link.ErrNotSupported as well.
	ErrNoHugepages = unsupported{errors.New("dpdk: no hugepages")}
	// ErrPortNotFound is returned when Config.Device names no port.
	ErrPortNotFound = errors.New("dpdk: port not found")
	// ErrTooFewQueues is returned when the port has fewer queue pairs than
	// Config.Queues asks for.
	ErrTooFewQueues = errors.New("dpdk: too few queues")
)

// EALError reports that rte_eal_init failed. EAL explains why on stderr;
// Errno is rte_errno (zero when EAL did not set it). EAL cannot be
// initialised again in the same process after most failures, so InitEAL
// returns the same error from then on.
type EALError struct {
	Args  []string
	Errno syscall.Errno
}

func (e *EALError) Error() string {
	reason := "no rte_errno"
	if e.Errno != 0 {
		reason = e.Errno.Error()
	}
	hint := ""
	switch e.Errno {
	case syscall.EACCES, syscall.ENOMEM:
		hint = "; check hugepages (see link/dpdk/README.md) or set EALConfig.NoHuge"
	case syscall.EINVAL:
		hint = "; an argument is invalid"
	case syscall.EALREADY:
		hint = "; EAL was initialised before, outside this package"
	}
	return fmt.Sprintf("dpdk: EAL initialisation failed (%s%s) with arguments %q; EAL printed the details on stderr",
		reason, hint, strings.Join(e.Args[1:], " "))
}

// Unwrap returns the errno, so errors.Is(err, syscall.EINVAL) works.
func (e *EALError) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return e.Errno
}

// unsupported marks an error as link.ErrNotSupported (the host or the
// PMD lacks something) while keeping its message and chain.
type unsupported struct{ error }

func (e unsupported) Unwrap() error { return e.error }

func (e unsupported) Is(target error) bool {
	return target == link.ErrNotSupported || target == e.error
}
