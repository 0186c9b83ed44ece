package reliability

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/internal/taptopo"
	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/link"
	"github.com/polarnet/polarnet/link/linktest"
	"github.com/polarnet/polarnet/polarnet"
)

// TestTinyMSS has a peer built of raw frames announce an MSS of 1 to 64
// bytes, in its SYN to a listener and in its SYN-ACK to a dial: the stack
// clamps it to the minimum a sender uses (48 bytes, Linux's
// tcp_min_snd_mss) rather than cut data into 1-byte segments, delivers
// every byte in order, and sends a bounded number of segments for it.
func TestTinyMSS(t *testing.T) {
	const size = 32 << 10
	// Frames on the wire: the raw peer reads the stack's segments one by one.
	e := newEnv(t, taptopo.Options{DisableOffloads: true})
	ln, err := e.Stack.ListenTCP("tcp", netip.AddrPortFrom(stack4, 0), 0, net.KeepAliveConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	raw := e.raw(t)
	rng := rand.New(rand.NewPCG(5, 6))
	want, err := io.ReadAll(xfer.Pattern(size, 7))
	require.NoError(t, err)

	for i, mss := range []uint16{1, 8, 36, 47, 48, 64} {
		for _, stackDials := range []bool{false, true} {
			role := "listener"
			if stackDials {
				role = "dial"
			}
			t.Run(fmt.Sprintf("MSS %d to a %s", mss, role), func(t *testing.T) {
				p := &rawPeer{e: e, q: raw, rx: make([]link.RxFrame, 32)}
				p.addr = netip.AddrPortFrom(spoofed.Addr().Next().Next(), uint16(40000+2*i))
				sent := make(chan error, 1)
				send := func(c *polarnet.TCPConn) {
					deadline(ioBound, c)
					_, err := c.Write(want)
					sent <- err
					c.Close()
				}
				iss := rng.Uint32()
				opts := frame.MSSOption(mss)
				var rcvNxt uint32
				if stackDials {
					p.addr = netip.AddrPortFrom(p.addr.Addr(), p.addr.Port()+1)
					go func() {
						c, err := e.Stack.DialTCP(t.Context(), "tcp", netip.AddrPort{}, p.addr)
						if err != nil {
							sent <- err
							return
						}
						send(c)
					}()
					syn, _, err := p.recv()
					require.NoError(t, err)
					require.True(t, syn.Has(frame.FlagSYN), "the dial's SYN")
					p.stack, rcvNxt = netip.AddrPortFrom(stack4, syn.SrcPort), syn.Seq+1
					require.NoError(t, p.send(iss, rcvNxt, frame.FlagSYN|frame.FlagACK, opts))
				} else {
					p.stack = ln.Addr().(*net.TCPAddr).AddrPort()
					go func() {
						ln.SetDeadline(time.Now().Add(ioBound))
						c, err := ln.AcceptTCP()
						if err != nil {
							sent <- err
							return
						}
						send(c)
					}()
					require.NoError(t, p.send(iss, 0, frame.FlagSYN, opts))
					synAck, _, err := p.recv()
					require.NoError(t, err)
					require.True(t, synAck.Has(frame.FlagSYN|frame.FlagACK), "the listener's SYN-ACK")
					rcvNxt = synAck.Seq + 1
				}
				// The handshake's last ACK (from the peer, or the stack's
				// with its first data) may come with data: recv sorts it out.
				if !stackDials {
					require.NoError(t, p.send(iss+1, rcvNxt, frame.FlagACK, nil))
				}

				clamp := max(int(mss), header.TCPMinimumSendMSS)
				limit := 2 * (size/clamp + 1) // every segment sent twice at most
				var got []byte
				segments, largest := 0, 0
				for range 2 * limit {
					seg, payload, err := p.recv()
					require.NoError(t, err)
					require.False(t, seg.Has(frame.FlagRST), "the stack reset the connection")
					if len(payload) > 0 {
						segments++
						largest = max(largest, len(payload))
					}
					if seg.Seq == rcvNxt {
						got = append(got, payload...)
						rcvNxt += uint32(len(payload))
						if seg.Has(frame.FlagFIN) {
							rcvNxt++
						}
					}
					require.NoError(t, p.send(iss+1, rcvNxt, frame.FlagACK, nil))
					if seg.Has(frame.FlagFIN) && seg.Seq+uint32(len(payload))+1 == rcvNxt {
						break
					}
				}
				require.NoError(t, <-sent)
				require.NoError(t, p.send(iss+1, 0, frame.FlagRST, nil))
				assert.True(t, bytes.Equal(want, got), "%d bytes received of %d, in order: %v", len(got), size, bytes.HasPrefix(want, got))
				assert.LessOrEqual(t, largest, clamp, "largest segment")
				assert.LessOrEqual(t, segments, limit, "data segments for %d bytes", size)
				t.Logf("announced MSS %d: %d data segments for %d bytes, the largest %d bytes", mss, segments, size, largest)
			})
		}
	}
}

// rawPeer is a TCP peer made of raw frames: it speaks from addr, an
// address in spoofed that the kernel side does not own, so only it
// answers the stack, whose segments reach it through the gateway.
type rawPeer struct {
	e           *env
	q           *linktest.PacketSocketLink
	addr, stack netip.AddrPort
	rx          []link.RxFrame
	queued      [][]byte
}

// send sends a segment to the stack, with a 64 KiB window and no window
// scaling: at most 64 KiB in flight.
func (p *rawPeer) send(seq, ack uint32, flags uint8, opts []byte) error {
	f := p.e.forge(frame.TCPSpec{Src: p.addr, Dst: p.stack, Seq: seq, Ack: ack, Flags: flags, Window: 0xffff, Options: opts})
	_, err := p.q.WriteBurst([]link.TxFrame{{Segs: [][]byte{f}}})
	return err
}

// recv returns the next segment the stack sends the peer (from any port of
// the stack's until p.stack is set) and its payload, waiting at most
// ioBound.
func (p *rawPeer) recv() (frame.TCP, []byte, error) {
	until := time.Now().Add(ioBound)
	for time.Now().Before(until) {
		for len(p.queued) > 0 {
			f := p.queued[0]
			p.queued = p.queued[1:]
			pkt, ok := frame.Parse(f)
			if !ok || pkt.Dst != p.addr.Addr() {
				continue
			}
			seg, ok := frame.ParseTCP(f, pkt)
			if ok && seg.DstPort == p.addr.Port() && (!p.stack.IsValid() || seg.SrcPort == p.stack.Port()) {
				return seg, f[pkt.L4+seg.HeaderLen : pkt.End], nil
			}
		}
		for i := range p.rx {
			if p.rx[i].Buf == nil {
				p.rx[i].Buf = make([]byte, p.q.Info().RxFrameSize)
			}
		}
		n, err := p.q.ReadBurst(p.rx)
		if err != nil {
			return frame.TCP{}, nil, err
		}
		for _, f := range p.rx[:n] {
			p.queued = append(p.queued, bytes.Clone(f.Buf[:f.Len]))
		}
		if n == 0 {
			wake := time.AfterFunc(time.Until(until), p.q.Interrupt)
			err := p.q.WaitRead()
			wake.Stop()
			if err != nil {
				return frame.TCP{}, nil, err
			}
		}
	}
	return frame.TCP{}, nil, fmt.Errorf("no segment from the stack in %v", ioBound)
}
