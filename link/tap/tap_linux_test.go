package tap

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/polarnet/polarnet/internal/netns"
	"github.com/polarnet/polarnet/internal/testenv"
	"github.com/polarnet/polarnet/link"
)

func TestInfo(t *testing.T) {
	testenv.RequirePriv(t)
	for _, tc := range []struct {
		name   string
		cfg    Config
		want   link.Info
		queues int
	}{
		{"defaults", Config{}, link.Info{
			MTU: 1500, RxFrameSize: gsoRxFrameSize, GSOMaxSize: gsoMaxSize,
			Caps: link.CapRXChecksum | link.CapTXChecksum | link.CapGSO,
		}, DefaultQueues()},
		{"no offloads", Config{DisableOffloads: true, MTU: 9000, Queues: 1}, link.Info{
			MTU: 9000, RxFrameSize: 9014,
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := openTAP(t, tc.cfg)
			info := l.Info()
			assert.Equal(t, tc.want.MTU, info.MTU)
			assert.Equal(t, tc.want.RxFrameSize, info.RxFrameSize)
			assert.Equal(t, tc.want.Caps, info.Caps)
			assert.Equal(t, tc.want.GSOMaxSize, info.GSOMaxSize)
			assert.Len(t, l.Queues(), tc.queues)

			ifi, err := net.InterfaceByName(info.Name)
			require.NoError(t, err)
			assert.Equal(t, tc.want.MTU, ifi.MTU, "MTU of the device")
			assert.NotEqual(t, ifi.HardwareAddr, info.MAC, "the device's MAC is the kernel side's")
			assert.Zero(t, ifi.Flags&net.FlagUp, "New must leave the device down")
		})
	}
	t.Run("template name", func(t *testing.T) {
		l := openTAP(t, Config{Name: "pntest%d"})
		assert.Regexp(t, `^pntest\d+$`, l.Info().Name)
	})
}

// TestMultiQueue writes a datagram through each queue of a two-queue device
// to a kernel socket, and has the kernel send many flows, which it spreads
// over both queues.
func TestMultiQueue(t *testing.T) {
	ns := newNS(t)
	// Without polarnet's steering program, which sends all UDP to queue 0,
	// the kernel spreads flows over the queues by its own hash.
	l := openTAP(t, Config{Queues: 2, DisableSteering: true})
	require.Len(t, l.Queues(), 2)
	kmac := plug(t, ns, l, 0)

	var pc net.PacketConn
	require.NoError(t, ns.Do(func() (err error) {
		pc, err = net.ListenPacket("udp4", kernelAddr(0).String()+":7000")
		return err
	}))
	defer pc.Close()
	for i, q := range l.Queues() {
		frame := udpv4Frame(kmac, l.Info().MAC,
			netip.AddrPortFrom(linkAddr(0), 7000), netip.AddrPortFrom(kernelAddr(0), 7000), fmt.Appendf(nil, "queue %d", i))
		n, err := q.WriteBurst([]link.TxFrame{{Segs: [][]byte{frame}}})
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
	got := map[string]bool{}
	require.NoError(t, pc.SetReadDeadline(time.Now().Add(5*time.Second)))
	buf := make([]byte, 100)
	for range 2 {
		n, _, err := pc.ReadFrom(buf)
		require.NoError(t, err)
		got[string(buf[:n])] = true
	}
	assert.Equal(t, map[string]bool{"queue 0": true, "queue 1": true}, got)

	// 64 flows all on one queue would be a 2^-63 chance.
	for port := range 64 {
		sendUDP(t, ns, 20000+port, netip.AddrPortFrom(linkAddr(0), 9), []byte("spread"))
	}
	frames := []link.RxFrame{{Buf: make([]byte, l.Info().RxFrameSize)}}
	counts := make([]int, 2)
	for deadline := time.Now().Add(5 * time.Second); counts[0]+counts[1] < 64 && time.Now().Before(deadline); {
		idle := true
		for i, q := range l.Queues() {
			n, err := q.ReadBurst(frames)
			require.NoError(t, err)
			if n == 1 {
				idle = false
				if _, ok := udpv4Payload(t, frames[0].Buf[:frames[0].Len], 9, true); ok {
					counts[i]++
				}
			}
		}
		if idle {
			time.Sleep(time.Millisecond)
		}
	}
	t.Logf("frames per queue: %v", counts)
	assert.Equal(t, 64, counts[0]+counts[1])
	assert.NotZero(t, counts[0])
	assert.NotZero(t, counts[1])
}

// TestWaitReadWakes checks that WaitRead returns for a frame that arrives
// while it waits, and for one that arrived before it was called (which the
// netpoller had already seen while nobody waited).
func TestWaitReadWakes(t *testing.T) {
	ns := newNS(t)
	l := openTAP(t, Config{Queues: 1})
	plug(t, ns, l, 0)
	q := l.Queues()[0]
	frames := []link.RxFrame{{Buf: make([]byte, l.Info().RxFrameSize)}}
	send := func() { sendUDP(t, ns, 0, netip.AddrPortFrom(linkAddr(0), 9), []byte("wake")) }
	// waitFor calls WaitRead and reports how long it took; a guard interrupts
	// it if nothing else does.
	waitFor := func() time.Duration {
		guard := time.AfterFunc(5*time.Second, q.Interrupt)
		defer guard.Stop()
		start := time.Now()
		require.NoError(t, q.WaitRead())
		return time.Since(start)
	}
	drain := func() int {
		total := 0
		for {
			n, err := q.ReadBurst(frames)
			require.NoError(t, err)
			if n == 0 {
				return total
			}
			total += n
		}
	}
	for i := range 3 {
		drain()
		time.AfterFunc(50*time.Millisecond, send)
		assert.Less(t, waitFor(), 2*time.Second, "round %d: frame while waiting", i)
		time.Sleep(50 * time.Millisecond)
		assert.Equal(t, 1, drain())

		send()
		time.Sleep(50 * time.Millisecond) // the frame is queued, the netpoller saw it
		assert.Less(t, waitFor(), 2*time.Second, "round %d: frame before waiting", i)
		assert.Equal(t, 1, drain())
	}
}

// TestInterrupt checks Interrupt on a device that is down, so no frame can
// wake WaitRead.
func TestInterrupt(t *testing.T) {
	testenv.RequirePriv(t)
	q := openTAP(t, Config{}).Queues()[0]
	wait := func() <-chan error {
		done := make(chan error, 1)
		go func() { done <- q.WaitRead() }()
		return done
	}

	q.Interrupt()
	q.Interrupt()
	select {
	case err := <-wait():
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("WaitRead ignored an Interrupt made before it")
	}

	for i := range 3 {
		done := wait()
		select {
		case err := <-done:
			t.Fatalf("round %d: WaitRead returned %v without a frame or an Interrupt", i, err)
		case <-time.After(50 * time.Millisecond):
		}
		q.Interrupt()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: WaitRead missed an Interrupt", i)
		}
	}

	// Interrupts from many goroutines against a poller: none may be lost, so
	// after the last one the poller's WaitRead returns.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := q.WaitRead(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for range 4 {
		wg.Go(func() {
			for range 2000 {
				q.Interrupt()
			}
		})
	}
	wg.Wait()
	close(stop)
	q.Interrupt()
	select {
	case <-polled:
	case <-time.After(5 * time.Second):
		t.Fatal("the poller missed the last Interrupt")
	}
}

func TestClose(t *testing.T) {
	testenv.RequirePriv(t)
	l, err := New(Config{Name: netns.UniqueName("pntap"), Queues: 2})
	require.NoError(t, err)
	name := l.Info().Name
	q := l.Queues()[0]
	done := make(chan error, 1)
	go func() { done <- q.WaitRead() }()
	time.Sleep(20 * time.Millisecond)

	require.NoError(t, l.Close())
	select {
	case err := <-done:
		assert.ErrorIs(t, err, link.ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a pending WaitRead")
	}
	_, err = q.ReadBurst(make([]link.RxFrame, 1))
	assert.ErrorIs(t, err, net.ErrClosed)
	_, err = q.WriteBurst([]link.TxFrame{{Segs: [][]byte{make([]byte, 60)}}})
	assert.ErrorIs(t, err, net.ErrClosed)
	assert.ErrorIs(t, q.WaitRead(), net.ErrClosed)
	q.Interrupt() // must not panic
	assert.ErrorIs(t, l.Close(), net.ErrClosed)

	exists, err := deviceExists(name)
	require.NoError(t, err)
	assert.False(t, exists, "closing must remove the device it created")
}

// TestCloseDuringBursts closes a link while other goroutines run bursts and
// waits on it, for the race detector and to see every call end.
func TestCloseDuringBursts(t *testing.T) {
	testenv.RequirePriv(t)
	l, err := New(Config{Name: netns.UniqueName("pntap")})
	require.NoError(t, err)
	q := l.Queues()[0]
	var wg sync.WaitGroup
	wg.Go(func() {
		frames := []link.RxFrame{{Buf: make([]byte, l.Info().RxFrameSize)}}
		for {
			if _, err := q.ReadBurst(frames); err != nil {
				assert.ErrorIs(t, err, link.ErrClosed)
				return
			}
			if err := q.WaitRead(); err != nil {
				assert.ErrorIs(t, err, link.ErrClosed)
				return
			}
		}
	})
	wg.Go(func() {
		frame := []link.TxFrame{{Segs: [][]byte{make([]byte, 60)}}}
		for {
			_, err := q.WriteBurst(frame)
			if errors.Is(err, link.ErrClosed) {
				return
			}
			assert.ErrorIs(t, err, unix.EIO, "the device was never set up")
			q.Interrupt()
		}
	})
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, l.Close())
	wg.Wait()
}

// TestPersistAndAttach creates a persistent device, attaches to it and checks
// what Close leaves behind.
func TestPersistAndAttach(t *testing.T) {
	testenv.RequirePriv(t)
	name := netns.UniqueName("pntap")
	l, err := New(Config{Name: name, Queues: 1, Persist: true, MTU: 4000})
	require.NoError(t, err)
	t.Cleanup(func() { exec.Command("ip", "link", "del", "dev", name).Run() })
	require.NoError(t, l.Close())
	exists, err := deviceExists(name)
	require.NoError(t, err)
	require.True(t, exists, "a persistent device must survive Close")

	// Attaching keeps the MTU unless asked for another, and takes the one
	// queue a device without multi-queue support has.
	l = openTAP(t, Config{Name: name})
	assert.Equal(t, 4000, l.Info().MTU)
	assert.Len(t, l.Queues(), 1)
	require.NoError(t, l.Close())

	// A device without multi-queue support takes one queue.
	_, err = New(Config{Name: name, Queues: 2})
	require.Error(t, err)
	assert.ErrorIs(t, err, unix.EINVAL)
	assert.Contains(t, err.Error(), "attaching to "+name)
	assert.Contains(t, err.Error(), "without multi-queue support and takes 1 queue, not 2")

	// One queue at a time, then.
	l = openTAP(t, Config{Name: name})
	_, err = New(Config{Name: name})
	assert.ErrorIs(t, err, unix.EBUSY)
	assert.Contains(t, err.Error(), "another file descriptor holds its only queue")
	require.NoError(t, l.Close())

	exists, err = deviceExists(name)
	require.NoError(t, err)
	assert.True(t, exists, "closing must keep a device it attached to")
}

// TestAttachMultiQueue attaches one queue, then the default number, to a
// multi-queue device, which the kernel only allows with IFF_MULTI_QUEUE.
func TestAttachMultiQueue(t *testing.T) {
	testenv.RequirePriv(t)
	l := openTAP(t, Config{Queues: 2})
	l2 := openTAP(t, Config{Name: l.Info().Name, Queues: 1})
	assert.Len(t, l2.Queues(), 1)
	require.NoError(t, l2.Close())
	l3 := openTAP(t, Config{Name: l.Info().Name})
	assert.Len(t, l3.Queues(), DefaultQueues())
}

func TestNewErrors(t *testing.T) {
	_, err := New(Config{Name: "polarnet-tap-too-long"})
	assert.EqualError(t, err, `tap: device name "polarnet-tap-too-long" is 21 bytes long; Linux allows at most 15`)

	testenv.RequirePriv(t)
	_, err = New(Config{Name: "lo"})
	assert.EqualError(t, err, "tap: attaching to lo: invalid argument (it is not a TAP device)")
	assert.ErrorIs(t, err, unix.EINVAL)
}

// TestNotPermitted runs New on a thread without CAP_NET_ADMIN.
func TestNotPermitted(t *testing.T) {
	testenv.RequirePriv(t)
	errc := make(chan error, 1)
	go func() {
		// Capabilities belong to a thread. This one is never unlocked: the
		// runtime ends it when the goroutine exits, capabilities and all.
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			errc <- err
			return
		}
		data[unix.CAP_NET_ADMIN/32].Effective &^= 1 << (unix.CAP_NET_ADMIN % 32)
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			errc <- err
			return
		}
		_, err := New(Config{Name: netns.UniqueName("pntap")})
		if err == nil {
			err = errors.New("New succeeded without CAP_NET_ADMIN")
		}
		errc <- err
	}()
	err := <-errc
	assert.ErrorIs(t, err, unix.EPERM)
	assert.Regexp(t, `^tap: creating pntap\w+: operation not permitted \(need root or CAP_NET_ADMIN\)$`, err.Error())
}

// TestWriteWhileDown writes to a device whose kernel side is down: the
// frame is refused with an error that says so, not left for a retry that
// could not succeed.
func TestWriteWhileDown(t *testing.T) {
	testenv.RequirePriv(t)
	l := openTAP(t, Config{}) // a new device is down until set up
	n, err := l.Queues()[0].WriteBurst([]link.TxFrame{{Segs: [][]byte{make([]byte, 60)}}})
	assert.Zero(t, n)
	assert.ErrorIs(t, err, unix.EIO)
	assert.ErrorContains(t, err, "(the device is down)")
}

// TestDeviceDeleted deletes the device under an open link.
func TestDeviceDeleted(t *testing.T) {
	testenv.RequirePriv(t)
	l := openTAP(t, Config{})
	out, err := exec.Command("ip", "link", "del", "dev", l.Info().Name).CombinedOutput()
	require.NoError(t, err, string(out))
	q := l.Queues()[0]
	// WaitRead returns at once, with the error if the netpoller has already
	// seen the device go.
	if err := q.WaitRead(); err != nil {
		assert.ErrorIs(t, err, unix.EBADFD)
	}
	for _, err := range []error{
		second(q.ReadBurst([]link.RxFrame{{Buf: make([]byte, l.Info().RxFrameSize)}})),
		second(q.WriteBurst([]link.TxFrame{{Segs: [][]byte{make([]byte, 60)}}})),
	} {
		assert.ErrorIs(t, err, unix.EBADFD)
		assert.ErrorContains(t, err, "(the device was deleted)")
	}
}

func second[T any](_ T, err error) error { return err }

// TestNoAllocs checks that bursts do not allocate in steady state.
func TestNoAllocs(t *testing.T) {
	ns := newNS(t)
	l := openTAP(t, Config{Queues: 1})
	kmac := plug(t, ns, l, 0)
	q := l.Queues()[0]
	frame := udpv4Frame(kmac, l.Info().MAC,
		netip.AddrPortFrom(linkAddr(0), 7000), netip.AddrPortFrom(kernelAddr(0), 9), []byte("no allocs"))
	tx := []link.TxFrame{{Segs: [][]byte{frame[:42], frame[42:]}}, {Segs: [][]byte{frame}}}
	rx := make([]link.RxFrame, 4)
	for i := range rx {
		rx[i].Buf = make([]byte, l.Info().RxFrameSize)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := q.WriteBurst(tx); err != nil {
			t.Fatal(err)
		}
		if _, err := q.ReadBurst(rx); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}
