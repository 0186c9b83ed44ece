package polarnet

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// fragmentUDP splits a UDP datagram with a blank checksum into fragments
// the way gVisor does, each carrying at most size payload bytes.
func fragmentUDP(t *testing.T, v6 bool, src, dst tcpip.Address, payload []byte, size int) []*stack.PacketBuffer {
	t.Helper()
	dgram := make([]byte, header.UDPMinimumSize+len(payload))
	header.UDP(dgram).Encode(&header.UDPFields{SrcPort: 5000, DstPort: 7, Length: uint16(len(dgram))})
	copy(dgram[header.UDPMinimumSize:], payload)
	var pkts []*stack.PacketBuffer
	for off := 0; off < len(dgram); off += size {
		end := min(off+size, len(dgram))
		more := end < len(dgram)
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{
			ReserveHeaderBytes: header.EthernetMinimumSize + header.IPv6MinimumSize + header.IPv6FragmentHeaderSize,
			Payload:            buffer.MakeWithData(append([]byte(nil), dgram[off:end]...)),
		})
		if v6 {
			nh := pkt.NetworkHeader().Push(header.IPv6MinimumSize + header.IPv6FragmentHeaderSize)
			header.IPv6(nh).Encode(&header.IPv6Fields{
				PayloadLength:     uint16(header.IPv6FragmentHeaderSize + end - off),
				TransportProtocol: header.IPv6FragmentHeader, HopLimit: 64, SrcAddr: src, DstAddr: dst,
			})
			frag := nh[header.IPv6MinimumSize:]
			frag[0] = uint8(header.UDPProtocolNumber)
			flags := uint16(off/8) << 3
			if more {
				flags |= 1
			}
			binary.BigEndian.PutUint16(frag[2:], flags)
			binary.BigEndian.PutUint32(frag[4:], 77)
			pkt.NetworkProtocolNumber = header.IPv6ProtocolNumber
		} else {
			nh := pkt.NetworkHeader().Push(header.IPv4MinimumSize)
			var flags uint8
			if more {
				flags = header.IPv4FlagMoreFragments
			}
			header.IPv4(nh).Encode(&header.IPv4Fields{
				TotalLength: uint16(header.IPv4MinimumSize + end - off), ID: 77, Flags: flags,
				FragmentOffset: uint16(off), TTL: 64, Protocol: uint8(header.UDPProtocolNumber), SrcAddr: src, DstAddr: dst,
			})
			pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
		}
		header.Ethernet(pkt.LinkHeader().Push(header.EthernetMinimumSize)).Encode(&header.EthernetFields{})
		pkts = append(pkts, pkt)
	}
	return pkts
}

// reassemble concatenates the fragments' payloads as they would go out.
func reassemble(pkts []*stack.PacketBuffer) []byte {
	var out []byte
	for _, pkt := range pkts {
		b := pkt.ToView().AsSlice()
		out = append(out, b[header.EthernetMinimumSize+len(pkt.NetworkHeader().Slice()):]...)
	}
	return out
}

func TestFragmentedUDPChecksumCompleted(t *testing.T) {
	payload := make([]byte, 4000)
	for i := range payload {
		payload[i] = byte(i*7 + 3)
	}
	for _, tc := range []struct {
		name     string
		v6       bool
		src, dst tcpip.Address
	}{
		{"ipv4", false, tcpip.AddrFrom4([4]byte{198, 18, 0, 2}), tcpip.AddrFrom4([4]byte{198, 18, 0, 1})},
		{"ipv6", true, tcpip.AddrFrom16([16]byte{0xfd, 0, 1, 0x98, 0, 0x18, 15: 2}), tcpip.AddrFrom16([16]byte{0xfd, 0, 1, 0x98, 0, 0x18, 15: 1})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkts := fragmentUDP(t, tc.v6, tc.src, tc.dst, payload, 1448)
			defer func() {
				for _, p := range pkts {
					p.DecRef()
				}
			}()
			require.Len(t, pkts, 3)
			assert.True(t, moreFragments(pkts[0]))
			assert.False(t, moreFragments(pkts[2]), "the last fragment")

			completeFragmentedUDP(pkts)
			dgram := reassemble(pkts)
			require.Len(t, dgram, header.UDPMinimumSize+len(payload))
			udp := header.UDP(dgram)
			assert.NotZero(t, udp.Checksum())
			assert.True(t, udp.IsChecksumValid(tc.src, tc.dst, checksum.Checksum(dgram[header.UDPMinimumSize:], 0)), "checksum over the whole datagram")
			assert.Equal(t, payload, dgram[header.UDPMinimumSize:], "payload untouched")
		})
	}
}

func TestFragmentedUDPIncompleteLeftAlone(t *testing.T) {
	src, dst := tcpip.AddrFrom4([4]byte{198, 18, 0, 2}), tcpip.AddrFrom4([4]byte{198, 18, 0, 1})
	pkts := fragmentUDP(t, false, src, dst, make([]byte, 3000), 1448)
	defer func() {
		for _, p := range pkts {
			p.DecRef()
		}
	}()
	// Without its last fragment the sum cannot be known: no guess.
	completeFragmentedUDP(pkts[:2])
	assert.Zero(t, header.UDP(reassemble(pkts)).Checksum())
}

func moreFragments(pkt *stack.PacketBuffer) bool {
	f, ok := fragmentOf(pkt)
	return ok && f.more
}
