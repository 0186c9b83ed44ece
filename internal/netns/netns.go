// Package netns builds network topologies out of network namespaces and
// veth pairs, using iproute2's ip command, for tests (through testenv.NewNS
// and testenv.Veth, which remove what they create when the test ends) and
// for tools and examples, which delete what they create themselves. Names
// carry a random suffix so that tests of different packages, which go test
// runs in parallel, never collide.
package netns

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxIfName is the longest interface name Linux accepts (IFNAMSIZ - 1).
const maxIfName = 15

// minSuffix is the shortest random suffix UniqueName accepts: 6 hex digits
// make a collision between concurrent tests unlikely enough.
const minSuffix = 6

// NS is a named network namespace created for a test.
type NS struct{ Name string }

// Create makes a uniquely named namespace with lo up, for programs (tools,
// examples) that manage its lifetime themselves: the caller must Delete it.
func Create() (*NS, error) {
	ns := &NS{Name: UniqueName("pn-")}
	if err := ip("netns", "add", ns.Name); err != nil {
		return nil, err
	}
	if err := ip("-n", ns.Name, "link", "set", "dev", "lo", "up"); err != nil {
		return nil, errors.Join(err, ns.Delete())
	}
	return ns, nil
}

// Delete kills the processes left in ns and deletes it: a leftover
// namespace would outlive the program.
func (ns *NS) Delete() error {
	var errs []error
	out, err := output("ip", "netns", "pids", ns.Name)
	if err != nil {
		errs = append(errs, fmt.Errorf("netns %s: listing processes to kill: %w", ns.Name, err))
	}
	for _, f := range strings.Fields(out) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("netns %s: bad pid %q from ip netns pids", ns.Name, f))
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("netns %s: killing process %d: %w", ns.Name, pid, err))
		}
	}
	if err := ip("netns", "delete", ns.Name); err != nil {
		errs = append(errs, fmt.Errorf("netns %s: %w", ns.Name, err))
	}
	return errors.Join(errs...)
}

// Do runs fn on a locked OS thread switched into the namespace, then switches
// back (thread is not reused if switching back fails). Used to open kernel
// sockets (net.Listen/net.Dial) that live in the namespace: sockets keep their
// namespace after the thread switches back.
//
// fn runs on a goroutine of its own, so it must not call t.FailNow (nor
// require.*); return an error instead. Goroutines that fn starts run on other
// threads, outside the namespace.
func (ns *NS) Do(fn func() error) error {
	target, err := unix.Open(filepath.Join("/run/netns", ns.Name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netns %s: %w", ns.Name, err)
	}
	defer unix.Close(target)

	// A fresh goroutine, rather than the caller's, owns the locked thread:
	// if the switch back fails it exits still locked, and the runtime then
	// terminates the thread instead of scheduling other goroutines on it in
	// the wrong namespace.
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- runIn(target, ns.Name, fn)
	}()
	return <-errc
}

// runIn switches the locked calling thread into the namespace open as fd
// target, runs fn, and switches back. It unlocks the thread only when the
// thread is back in its original namespace.
func runIn(target int, name string, fn func() error) error {
	// thread-self, not self: only this thread's namespace is switched.
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns %s: opening current namespace: %w", name, err)
	}
	defer unix.Close(orig)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns %s: entering: %w", name, err)
	}
	fnErr := fn()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		return errors.Join(fnErr, fmt.Errorf("netns %s: leaving: %w", name, err))
	}
	runtime.UnlockOSThread()
	return fnErr
}

// Exec runs a command inside the namespace (ip netns exec) and returns
// combined output; error includes the output.
func (ns *NS) Exec(args ...string) (string, error) {
	return output("ip", append([]string{"netns", "exec", ns.Name}, args...)...)
}

// MoveLink moves an interface from the current namespace into ns.
//
// Moving an interface takes it down; MoveLink brings it up again in ns, so
// that links made by AddVeth stay up wherever they go.
func (ns *NS) MoveLink(ifname string) error {
	if err := ip("link", "set", "dev", ifname, "netns", ns.Name); err != nil {
		return err
	}
	return ip("-n", ns.Name, "link", "set", "dev", ifname, "up")
}

// Configure sets the MTU of interface dev in ns, adds addrs to it (IPv6
// without duplicate address detection, so they are usable at once) and
// brings it up.
func (ns *NS) Configure(dev string, mtu int, addrs ...netip.Prefix) error {
	cmds := [][]string{{"link", "set", "dev", dev, "mtu", strconv.Itoa(mtu), "up"}}
	for _, a := range addrs {
		cmd := []string{"addr", "add", a.String(), "dev", dev}
		if a.Addr().Is6() {
			cmd = append(cmd, "nodad")
		}
		cmds = append(cmds, cmd)
	}
	for _, c := range cmds {
		if err := ip(append([]string{"-n", ns.Name}, c...)...); err != nil {
			return err
		}
	}
	return nil
}

// AddVeth creates a veth pair named a/b in the current namespace, both up.
func AddVeth(a, b string) error {
	if err := ip("link", "add", "dev", a, "type", "veth", "peer", "name", b); err != nil {
		return err
	}
	for _, name := range []string{a, b} {
		if err := ip("link", "set", "dev", name, "up"); err != nil {
			return errors.Join(err, DeleteVeth(a, b))
		}
	}
	return nil
}

// DeleteVeth deletes the veth pair a/b if an end is still in the current
// namespace; ends moved into another namespace go away with it.
func DeleteVeth(a, b string) error {
	for _, name := range []string{a, b} {
		if _, err := net.InterfaceByName(name); err != nil {
			continue // moved to another namespace, or gone with it
		}
		// Deleting one end deletes its peer.
		if err := ip("link", "del", "dev", name); err != nil {
			return fmt.Errorf("deleting veth pair %s/%s: %w", a, b, err)
		}
		return nil
	}
	return nil
}

// UniqueName returns a short unique interface name with the given prefix
// (<= 15 chars). The prefix must leave room for a random suffix of at least
// 6 characters (a prefix of at most 9); a longer one is a bug in the caller
// and panics.
func UniqueName(prefix string) string {
	n := min(maxIfName-len(prefix), 8)
	if n < minSuffix {
		panic(fmt.Sprintf("netns: prefix %q too long for a unique interface name", prefix))
	}
	b := make([]byte, (n+1)/2)
	rand.Read(b) // never fails (crypto/rand)
	return prefix + hex.EncodeToString(b)[:n]
}

// ip runs the ip command with args.
func ip(args ...string) error {
	_, err := output("ip", args...)
	return err
}

// output runs a command and returns its combined output; the error quotes
// the command and its output, which is where ip explains what went wrong.
func output(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
