package polarnet_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/internal/frame"
	"github.com/polarnet/polarnet/internal/xfer"
	"github.com/polarnet/polarnet/link/capture"
	"github.com/polarnet/polarnet/link/impair"
	"github.com/polarnet/polarnet/link/pipe"
)

// TestFinWaitReceiverSACKs exchanges data both ways over a lossy link, the
// client half-closing before it receives: its ACKs after its FIN must
// carry SACK blocks, as an ESTABLISHED receiver's do.
func TestFinWaitReceiverSACKs(t *testing.T) {
	la, lb := pipe.New(pipe.Config{})
	rec := capture.NewBuffer(capture.BufferConfig{Snaplen: 128})
	lossy := impair.New(la, impair.Symmetric(impair.Impairment{Loss: 0.02}, 1))
	a := newStack(t, capture.New(lossy, rec), addrA, addrA6)
	b := newStack(t, lb, addrB, addrB6)
	client, srv := connPair(t, a, b, addrB.Addr())
	deadline := time.Now().Add(2 * time.Minute)
	require.NoError(t, client.SetDeadline(deadline))
	require.NoError(t, srv.SetDeadline(deadline))

	require.NoError(t, xfer.Exchange(client, srv, 4<<20))

	finSent, acks, sacks := false, 0, 0
	for _, p := range rec.Packets() {
		ip, ok := frame.ParseTruncated(p.Data)
		if p.Dir != capture.Out || !ok {
			continue // received, or not IP (ARP)
		}
		tcp, ok := frame.ParseTCP(p.Data, ip)
		if !ok {
			continue
		}
		switch {
		case tcp.Has(frame.FlagFIN):
			finSent = true
		case finSent && tcp.PayloadLen == 0 && tcp.Flags == frame.FlagACK:
			acks++
			if tcp.Options.SACKBlocks > 0 {
				sacks++
			}
		}
	}
	require.True(t, finSent)
	require.Positive(t, lossy.Stats().Ingress.Lost, "the link lost frames to the client")
	assert.Positive(t, sacks, "of %d pure ACKs after the client's FIN, none had SACK blocks", acks)
}
