package polarnet

import (
	"context"
	"net"
	"os"
	"syscall"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// errnoOf is the one table from gVisor's errors to the errnos the kernel's
// sockets report for the same condition.
func errnoOf(err tcpip.Error) syscall.Errno {
	switch err.(type) {
	case *tcpip.ErrConnectionRefused:
		return syscall.ECONNREFUSED
	case *tcpip.ErrConnectionReset:
		return syscall.ECONNRESET
	case *tcpip.ErrConnectionAborted, *tcpip.ErrAborted:
		return syscall.ECONNABORTED
	case *tcpip.ErrTimeout:
		return syscall.ETIMEDOUT
	case *tcpip.ErrNetworkUnreachable, *tcpip.ErrNoNet:
		return syscall.ENETUNREACH
	case *tcpip.ErrHostUnreachable:
		return syscall.EHOSTUNREACH
	case *tcpip.ErrHostDown:
		return syscall.EHOSTDOWN
	case *tcpip.ErrPortInUse, *tcpip.ErrDuplicateAddress:
		return syscall.EADDRINUSE
	case *tcpip.ErrBadLocalAddress, *tcpip.ErrNoPortAvailable:
		return syscall.EADDRNOTAVAIL
	case *tcpip.ErrAlreadyConnected:
		return syscall.EISCONN
	case *tcpip.ErrAlreadyConnecting:
		return syscall.EALREADY
	case *tcpip.ErrNotConnected:
		return syscall.ENOTCONN
	case *tcpip.ErrClosedForSend:
		return syscall.EPIPE
	case *tcpip.ErrWouldBlock:
		return syscall.EAGAIN
	case *tcpip.ErrConnectStarted:
		return syscall.EINPROGRESS
	case *tcpip.ErrMessageTooLong:
		return syscall.EMSGSIZE
	case *tcpip.ErrNoBufferSpace:
		return syscall.ENOBUFS
	case *tcpip.ErrAddressFamilyNotSupported:
		return syscall.EAFNOSUPPORT
	case *tcpip.ErrBadAddress, *tcpip.ErrBadBuffer:
		return syscall.EFAULT
	case *tcpip.ErrDestinationRequired:
		return syscall.EDESTADDRREQ
	case *tcpip.ErrNotSupported:
		return syscall.EOPNOTSUPP
	case *tcpip.ErrNotPermitted:
		return syscall.EPERM
	case *tcpip.ErrBroadcastDisabled:
		return syscall.EACCES
	case *tcpip.ErrUnknownProtocolOption:
		return syscall.ENOPROTOOPT
	case *tcpip.ErrEndpointBusy:
		return syscall.EBUSY
	}
	return syscall.EINVAL
}

// syscallErr wraps a gVisor error the way Go's net wraps an errno:
// *os.SyscallError naming the system call the kernel path would have made.
func syscallErr(call string, err tcpip.Error) error {
	return os.NewSyscallError(call, errnoOf(err))
}

// opError builds the *net.OpError Go's net returns, keeping nil addresses as
// untyped nils so err.Error() reads the same.
func opError(op, network string, source, addr net.Addr, err error) *net.OpError {
	e := &net.OpError{Op: op, Net: network, Err: err}
	if source != nil && !isNilAddr(source) {
		e.Source = source
	}
	if addr != nil && !isNilAddr(addr) {
		e.Addr = addr
	}
	return e
}

func isNilAddr(a net.Addr) bool {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a == nil
	case *net.UDPAddr:
		return a == nil
	}
	return false
}

// ContextError maps a context error as Go's net does for dials: cancellation
// reads "operation was canceled", an expired deadline "i/o timeout", and both
// still match the context errors with errors.Is.
func ContextError(err error) error {
	switch err {
	case context.Canceled:
		return errCanceled
	case context.DeadlineExceeded:
		return errDialTimeout
	}
	return err
}

var (
	errCanceled    = &canceledError{}
	errDialTimeout = &timeoutError{}
)

type canceledError struct{}

func (*canceledError) Error() string        { return "operation was canceled" }
func (*canceledError) Is(target error) bool { return target == context.Canceled }
func (*canceledError) Unwrap() error        { return nil }
func (*canceledError) Timeout() bool        { return false }
func (*canceledError) Temporary() bool      { return false }

type timeoutError struct{}

func (*timeoutError) Error() string        { return "i/o timeout" }
func (*timeoutError) Timeout() bool        { return true }
func (*timeoutError) Temporary() bool      { return true }
func (*timeoutError) Is(target error) bool { return target == context.DeadlineExceeded }
