package tap_test

import (
	"log"
	"net/netip"

	"github.com/polarnet/polarnet/link/tap"
	"github.com/polarnet/polarnet/polarnet"
)

// A stack on a two-queue TAP device (one shard per queue), made the default
// of dialer and listener. It needs CAP_NET_ADMIN; the kernel's side of tap0
// is configured as any interface (ip addr add 198.18.0.1/24 dev tap0).
// POLARNET_LINK=tap POLARNET_DEVICE=tap0 POLARNET_QUEUES=2
// POLARNET_ADDR=198.18.0.2/24 does the same from the environment.
func ExampleNew() {
	l, err := tap.New(tap.Config{Name: "tap0", Queues: 2})
	if err != nil {
		log.Fatal(err)
	}
	info := l.Info()
	log.Printf("%s: MTU %d, %d queues, offloads %b", info.Name, info.MTU, len(l.Queues()), info.Caps)
	st, err := polarnet.New(polarnet.Config{Link: l, Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.0.2/24")}})
	if err != nil {
		log.Fatal(err) // New closed the link
	}
	defer st.Close()
	polarnet.SetDefault(st)
}
