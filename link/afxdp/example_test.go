package afxdp_test

import (
	"log"
	"net/netip"

	"github.com/polarnet/polarnet/link/afxdp"
	"github.com/polarnet/polarnet/polarnet"
)

// A stack on AF_XDP sockets bound to eth1's first two queues. The XDP
// program hands the stack the frames addressed to it and leaves the rest of
// eth1's traffic to the kernel, so the link needs the stack's addresses
// too. It needs CAP_NET_ADMIN and CAP_BPF (root).
func ExampleNew() {
	addrs := []netip.Prefix{netip.MustParsePrefix("198.18.0.2/24")}
	l, err := afxdp.New(afxdp.Config{Interface: "eth1", Queues: 2, Addresses: addrs})
	if err != nil {
		log.Fatal(err)
	}
	st, err := polarnet.New(polarnet.Config{Link: l, Addrs: addrs})
	if err != nil {
		log.Fatal(err) // New closed the link
	}
	defer st.Close()
	polarnet.SetDefault(st)
}
