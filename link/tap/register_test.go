package tap

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/link"
)

func TestConfigFromParams(t *testing.T) {
	cfg, err := configFromParams(link.Params{
		Device: "tap9", Queues: 2, MTU: 9000,
		Options: map[string]string{"offloads": "off", "persist": "true", "mac": "02:00:00:00:00:09"},
	})
	require.NoError(t, err)
	mac, _ := net.ParseMAC("02:00:00:00:00:09")
	assert.Equal(t, Config{Name: "tap9", Queues: 2, MTU: 9000, DisableOffloads: true, Persist: true, MAC: mac}, cfg)

	for _, opts := range []map[string]string{{"offloads": "maybe"}, {"mac": "zz"}, {"colour": "blue"}} {
		_, err := configFromParams(link.Params{Options: opts})
		assert.Error(t, err, "%v", opts)
	}
}
