// Package link is the contract between polarnet's engine and its links: a
// Link is a network device with one or more queue pairs (Queue) that move
// Ethernet frames (RxFrame, TxFrame) in bursts, with optional offloads
// (Capabilities), flow steering (Steerer) and counters of its own
// (Statser). The engine (package polarnet) imports this package and adapts
// each queue pair to a gVisor NIC; links import only this package and what
// their device needs, never the engine or gVisor.
//
// # Registration
//
// A link kind is selectable with POLARNET_LINK when its package is linked
// into the binary: every link package calls Register from init, and
// polarnet.NewFromEnv opens the kind with Open. Packages dialer and listener
// import the pure-Go links (link/tap, link/afxdp), so any program using them
// can switch to those with the environment alone. The cgo links (link/dpdk,
// link/rdma) need a build tag and so a deliberate choice: build with the tag
// and import the package, blank if nothing else of it is used, so that pure-Go
// builds never link cgo:
//
//	import _ "github.com/polarnet/polarnet/link/dpdk" // go build -tags dpdk
//
// In a build without its tag such a package registers nothing and its New
// returns an error wrapping ErrNotSupported.
package link
