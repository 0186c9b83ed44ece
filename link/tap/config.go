package tap

import (
	"crypto/rand"
	"fmt"
	"net"
	"runtime"
	"strings"
)

// DefaultName is the name template New uses when Config.Name is empty: the
// kernel replaces %d with the lowest number no device uses yet.
const DefaultName = "pntap%d"

// MaxQueues is the kernel's limit on the queues of one TAP device
// (MAX_TAP_QUEUES in drivers/net/tun.c).
const MaxQueues = 256

// ifNameSize is IFNAMSIZ: a device name and its terminating NUL.
const ifNameSize = 16

// Config configures a TAP link. The zero value is usable: it creates a new
// device named from DefaultName with a queue per CPU, MTU 1500, offloads on
// and a random MAC address.
type Config struct {
	// Name is the device to create or attach to. If a device of that name
	// exists in the calling thread's network namespace, New attaches to it;
	// otherwise New creates it. A name with %d (the default, DefaultName) is a
	// template: the kernel picks the number and New always creates a device.
	// Linux allows at most 15 bytes, without '/', ':' or white space.
	Name string

	// Queues is the number of queue pairs, each a file descriptor of its own
	// and a shard of the engine's. Default: one per CPU the process may run
	// on (runtime.GOMAXPROCS), or 1 for an existing device created without
	// IFF_MULTI_QUEUE, which takes no more. More than one creates the device
	// with IFF_MULTI_QUEUE; an existing device must then have been created
	// with it too.
	Queues int

	// MTU is the largest IP packet of one frame on the wire (default 1500 for
	// a device New creates, the device's current MTU for one it attaches to).
	// New sets it on the device.
	MTU int

	// MAC is the address of the polarnet side of the link: the source of the
	// frames it sends and the address the kernel side must send to. It is not
	// the TAP device's own address, which the kernel picks and which
	// `ip link` shows. Default: a random locally administered unicast address.
	MAC net.HardwareAddr

	// DisableOffloads turns off the virtio-net header: no checksum offload,
	// no GSO, frames of at most MTU+14 bytes. By default the link exchanges
	// checksum-partial frames and TCP frames of up to 64 KiB with the kernel,
	// which completes and segments them (and hands over coalesced ones).
	DisableOffloads bool

	// DisableSteering leaves a multi-queue device without polarnet's steering
	// program, so the kernel spreads flows by its own hash and the engine
	// hands frames that reach the wrong shard to their owner in software.
	// By default each TCP flow is steered to its shard's queue.
	DisableSteering bool

	// Persist keeps a device New creates after the link is closed
	// (TUNSETPERSIST), for a later New to attach to; delete it with
	// `ip link del`. Without it, a created device disappears when its last
	// file descriptor closes. New never changes the persistence of a device
	// it attaches to.
	Persist bool
}

// withDefaults returns c with its zero fields replaced by defaults, except
// Queues and MTU, whose defaults depend on the device (see New). It checks
// what can be checked before asking the kernel, so mistakes get a clear
// error.
func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if err := checkName(c.Name); err != nil {
		return c, err
	}
	if c.Queues < 0 || c.Queues > MaxQueues {
		return c, fmt.Errorf("tap: %d queues requested; a TAP device has 1 to %d", c.Queues, MaxQueues)
	}
	if c.MTU < 0 {
		return c, fmt.Errorf("tap: negative MTU %d", c.MTU)
	}
	if c.MAC == nil {
		c.MAC = randomMAC()
	} else {
		if len(c.MAC) != 6 || c.MAC[0]&1 != 0 {
			return c, fmt.Errorf("tap: MAC %v is not a unicast Ethernet address", c.MAC)
		}
		// Copy, so the caller's later changes do not reach link.Info.
		c.MAC = append(net.HardwareAddr(nil), c.MAC...)
	}
	return c, nil
}

// DefaultQueues is Config.Queues' default for a device New creates: one queue
// per CPU the process may run on, so the engine runs a shard per core.
func DefaultQueues() int { return min(runtime.GOMAXPROCS(0), MaxQueues) }

// checkName applies the kernel's rules for device names (dev_valid_name), so
// a bad name is reported as such rather than as EINVAL from an ioctl.
func checkName(name string) error {
	switch {
	case len(name) >= ifNameSize:
		return fmt.Errorf("tap: device name %q is %d bytes long; Linux allows at most %d", name, len(name), ifNameSize-1)
	case name == "." || name == "..":
		return fmt.Errorf("tap: %q is not a valid device name", name)
	case strings.ContainsAny(name, "/: \t\n\v\f\r"):
		return fmt.Errorf("tap: device name %q contains '/', ':' or white space", name)
	}
	return nil
}

// randomMAC returns a random locally administered unicast address, so it
// cannot collide with a vendor-assigned one.
func randomMAC() net.HardwareAddr {
	mac := make(net.HardwareAddr, 6)
	rand.Read(mac)
	mac[0] = mac[0]&^0x01 | 0x02
	return mac
}
