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
// import every link, so any program using them switches with the
// environment alone. The build decides what DPDK and RDMA are: with the
// build tag (go build -tags dpdk, -tags rdma; cgo) the real link, without
// it a pure-Go stub whose New, and POLARNET_LINK, return an error wrapping
// ErrNotSupported that says how to build with it. A program that opens
// links itself imports the packages it uses, as any Go package.
package link
