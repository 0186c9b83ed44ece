package tap

import (
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/link"
)

// TestAttachError covers the explanations of attachError that a test cannot
// provoke on a working host.
func TestAttachError(t *testing.T) {
	cfg := Config{Name: "tap0", Queues: 1}
	for _, tc := range []struct {
		name        string
		err         error
		exists      bool
		want        string
		unsupported bool
	}{
		{"no /dev/net/tun", &os.PathError{Op: "open", Path: tunPath, Err: unix.ENOENT}, false,
			"tap: creating tap0: open /dev/net/tun: no such file or directory (load the TUN/TAP driver: modprobe tun)", true},
		{"no driver", &os.PathError{Op: "open", Path: tunPath, Err: unix.ENODEV}, false,
			"tap: creating tap0: open /dev/net/tun: no such device (load the TUN/TAP driver: modprobe tun)", true},
		{"no access", &os.PathError{Op: "open", Path: tunPath, Err: unix.EACCES}, false,
			"tap: creating tap0: open /dev/net/tun: permission denied (need root or CAP_NET_ADMIN)", false},
		{"not permitted", unix.EPERM, true,
			"tap: attaching to tap0: operation not permitted (need root or CAP_NET_ADMIN)", false},
		{"other", unix.ENOMEM, false, "tap: creating tap0: cannot allocate memory", false},
		{"other open error", &os.PathError{Op: "open", Path: tunPath, Err: unix.EMFILE}, true,
			"tap: attaching to tap0: open /dev/net/tun: too many open files", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := attachError(cfg, tc.exists, tc.err)
			assert.EqualError(t, err, tc.want)
			assert.ErrorIs(t, err, tc.err)
			assert.Equal(t, tc.unsupported, errors.Is(err, link.ErrNotSupported))
		})
	}
}
