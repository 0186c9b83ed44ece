//go:build dpdk && linux && cgo

package dpdk

// #include <rte_ethdev.h>
// #include <rte_mbuf.h>
// #include "shim.h"
import "C"

// headerConstants returns the values rte_ethdev.h and rte_mbuf_core.h give
// the flags plan.go and txmeta.go define in pure Go, so a test can compare.
func headerConstants() map[string][2]uint64 {
	return map[string][2]uint64{
		"RX_OFFLOAD_IPV4_CKSUM":  {rxOffloadIPv4Cksum, C.RTE_ETH_RX_OFFLOAD_IPV4_CKSUM},
		"RX_OFFLOAD_UDP_CKSUM":   {rxOffloadUDPCksum, C.RTE_ETH_RX_OFFLOAD_UDP_CKSUM},
		"RX_OFFLOAD_TCP_CKSUM":   {rxOffloadTCPCksum, C.RTE_ETH_RX_OFFLOAD_TCP_CKSUM},
		"RX_OFFLOAD_SCATTER":     {rxOffloadScatter, C.RTE_ETH_RX_OFFLOAD_SCATTER},
		"TX_OFFLOAD_IPV4_CKSUM":  {txOffloadIPv4Cksum, C.RTE_ETH_TX_OFFLOAD_IPV4_CKSUM},
		"TX_OFFLOAD_UDP_CKSUM":   {txOffloadUDPCksum, C.RTE_ETH_TX_OFFLOAD_UDP_CKSUM},
		"TX_OFFLOAD_TCP_CKSUM":   {txOffloadTCPCksum, C.RTE_ETH_TX_OFFLOAD_TCP_CKSUM},
		"TX_OFFLOAD_TCP_TSO":     {txOffloadTCPTSO, C.RTE_ETH_TX_OFFLOAD_TCP_TSO},
		"TX_OFFLOAD_MULTI_SEGS":  {txOffloadMultiSegs, C.RTE_ETH_TX_OFFLOAD_MULTI_SEGS},
		"RSS_IPV4":               {rssIPv4, C.RTE_ETH_RSS_IPV4},
		"RSS_FRAG_IPV4":          {rssFragIPv4, C.RTE_ETH_RSS_FRAG_IPV4},
		"RSS_NONFRAG_IPV4_TCP":   {rssIPv4TCP, C.RTE_ETH_RSS_NONFRAG_IPV4_TCP},
		"RSS_NONFRAG_IPV4_UDP":   {rssIPv4UDP, C.RTE_ETH_RSS_NONFRAG_IPV4_UDP},
		"RSS_NONFRAG_IPV4_OTHER": {rssIPv4Other, C.RTE_ETH_RSS_NONFRAG_IPV4_OTHER},
		"RSS_IPV6":               {rssIPv6, C.RTE_ETH_RSS_IPV6},
		"RSS_FRAG_IPV6":          {rssFragIPv6, C.RTE_ETH_RSS_FRAG_IPV6},
		"RSS_NONFRAG_IPV6_TCP":   {rssIPv6TCP, C.RTE_ETH_RSS_NONFRAG_IPV6_TCP},
		"RSS_NONFRAG_IPV6_UDP":   {rssIPv6UDP, C.RTE_ETH_RSS_NONFRAG_IPV6_UDP},
		"RSS_NONFRAG_IPV6_OTHER": {rssIPv6Other, C.RTE_ETH_RSS_NONFRAG_IPV6_OTHER},
		"MBUF_F_TX_TCP_SEG":      {mbufTxTCPSeg, C.RTE_MBUF_F_TX_TCP_SEG},
		"MBUF_F_TX_TCP_CKSUM":    {mbufTxTCPCksum, C.RTE_MBUF_F_TX_TCP_CKSUM},
		"MBUF_F_TX_UDP_CKSUM":    {mbufTxUDPCksum, C.RTE_MBUF_F_TX_UDP_CKSUM},
		"MBUF_F_TX_IP_CKSUM":     {mbufTxIPCksum, C.RTE_MBUF_F_TX_IP_CKSUM},
		"MBUF_F_TX_IPV4":         {mbufTxIPv4, C.RTE_MBUF_F_TX_IPV4},
		"MBUF_F_TX_IPV6":         {mbufTxIPv6, C.RTE_MBUF_F_TX_IPV6},
		"PKTMBUF_HEADROOM":       {mbufHeadroom, C.RTE_PKTMBUF_HEADROOM},
		"RX_BURST":               {rxBurst, C.PN_RX_BURST},
		"TX_BURST":               {txBurst, C.PN_TX_BURST},
		"TX_STASH":               {txStashMax, C.PN_TX_STASH},
	}
}
