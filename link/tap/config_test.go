package tap

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigDefaults(t *testing.T) {
	c, err := Config{}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, DefaultName, c.Name)
	assert.Zero(t, c.Queues, "the Queues default depends on the device")
	assert.Zero(t, c.MTU, "the MTU default depends on the device")
	require.Len(t, c.MAC, 6)
	assert.Equal(t, byte(0x02), c.MAC[0]&0x03, "MAC must be unicast and locally administered")

	c2, err := Config{}.withDefaults()
	require.NoError(t, err)
	assert.NotEqual(t, c.MAC, c2.MAC, "MACs must be random")

	mac := net.HardwareAddr{0x02, 1, 2, 3, 4, 5}
	c, err = Config{Name: "tap0", Queues: 4, MTU: 9000, MAC: mac}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, Config{Name: "tap0", Queues: 4, MTU: 9000, MAC: mac}, c)
	mac[5] = 99
	assert.Equal(t, byte(5), c.MAC[5], "Config must not alias the caller's MAC")
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Name: "sixteen-bytes-xx"}, `tap: device name "sixteen-bytes-xx" is 16 bytes long; Linux allows at most 15`},
		{Config{Name: ".."}, `tap: ".." is not a valid device name`},
		{Config{Name: "tap/0"}, `tap: device name "tap/0" contains '/', ':' or white space`},
		{Config{Name: "tap 0"}, `tap: device name "tap 0" contains '/', ':' or white space`},
		{Config{Name: "tap:0"}, `tap: device name "tap:0" contains '/', ':' or white space`},
		{Config{Queues: -1}, "tap: -1 queues requested; a TAP device has 1 to 256"},
		{Config{Queues: 257}, "tap: 257 queues requested; a TAP device has 1 to 256"},
		{Config{MTU: -1}, "tap: negative MTU -1"},
		{Config{MAC: net.HardwareAddr{1, 0, 0x5e, 0, 0, 1}}, "tap: MAC 01:00:5e:00:00:01 is not a unicast Ethernet address"},
		{Config{MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0, 0, 1}}, "tap: MAC 02:00:00:00:00:00:00:01 is not a unicast Ethernet address"},
	} {
		_, err := tc.cfg.withDefaults()
		assert.EqualError(t, err, tc.want)
	}
	c, err := Config{Name: "fifteen-bytes-x"}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, "fifteen-bytes-x", c.Name)
}
