package link_test

import (
	"errors"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
)

func TestRegisterAndOpen(t *testing.T) {
	want := errors.New("opened")
	var got link.Params
	link.Register("test-kind", func(p link.Params) (link.Link, error) {
		got = p
		return nil, want
	})
	_, err := link.Open("test-kind", link.Params{Device: "dev0", Queues: 2})
	assert.ErrorIs(t, err, want, "Open calls the registered opener")
	assert.Equal(t, link.Params{Device: "dev0", Queues: 2}, got)

	_, err = link.Open("no-such-kind", link.Params{})
	require.ErrorIs(t, err, link.ErrNotSupported)
	assert.ErrorContains(t, err, `unknown link "no-such-kind"`)
	assert.ErrorContains(t, err, "test-kind", "the error lists the registered kinds")
}

func TestErrClosedIsNetErrClosed(t *testing.T) {
	assert.ErrorIs(t, link.ErrClosed, net.ErrClosed)
	assert.NotErrorIs(t, link.ErrNotSupported, net.ErrClosed)
}

func TestPortSteering(t *testing.T) {
	assert.Equal(t, 0, link.PortSteering(1000, 2000, 1), "one queue")
	assert.Equal(t, link.PortSteering(2000, 1000, 4), link.PortSteering(1000, 2000, 4), "symmetric")
	// Kernel clients of one server port: Linux's connect() takes ephemeral
	// ports of one parity (even, from 32768 up by default), and their flows
	// must still reach every queue, an even number of queues included.
	const clients = 1000
	for _, server := range []uint16{5186, 5187, 443} {
		for _, queues := range []int{2, 3, 4, 8} {
			per := make([]int, queues)
			for i := range clients {
				per[link.PortSteering(server, uint16(32768+2*i), queues)]++
			}
			for q, n := range per {
				assert.Greater(t, n, clients/queues/2, "server port %d, %d queues: queue %d's share", server, queues, q)
			}
		}
	}
}

func TestTxFrameLen(t *testing.T) {
	f := link.TxFrame{Segs: [][]byte{make([]byte, 14), nil, make([]byte, 40)}}
	assert.Equal(t, 54, f.Len())
}
