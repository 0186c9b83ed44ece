package dialer_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"reflect"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/polarnet/polarnet/dialer"
	"github.com/polarnet/polarnet/link/pipe"
	"github.com/polarnet/polarnet/listener"
	"github.com/polarnet/polarnet/polarnet"
)

// The drop-in API surface: what a program written against Go's net calls
// must exist on polarnet's types with net's signatures.

// Compile-time: the package-level functions have net's signatures, and the
// conn types satisfy net's interfaces.
var (
	_ func(string, string) (net.Conn, error)                                                = dialer.Dial
	_ func(context.Context, string, string) (net.Conn, error)                               = dialer.DialContext
	_ func(string, string, time.Duration) (net.Conn, error)                                 = dialer.DialTimeout
	_ func(string, string) (net.Listener, error)                                            = listener.Listen
	_ func(string, string) (net.PacketConn, error)                                          = listener.ListenPacket
	_ func(*dialer.Dialer, string, string) (net.Conn, error)                                = (*dialer.Dialer).Dial
	_ func(*dialer.Dialer, context.Context, string, string) (net.Conn, error)               = (*dialer.Dialer).DialContext
	_ func(*listener.ListenConfig, context.Context, string, string) (net.Listener, error)   = (*listener.ListenConfig).Listen
	_ func(*listener.ListenConfig, context.Context, string, string) (net.PacketConn, error) = (*listener.ListenConfig).ListenPacket

	_ net.Conn       = (*polarnet.TCPConn)(nil)
	_ io.ReaderFrom  = (*polarnet.TCPConn)(nil)
	_ io.WriterTo    = (*polarnet.TCPConn)(nil)
	_ net.Listener   = (*polarnet.TCPListener)(nil)
	_ net.Conn       = (*polarnet.UDPConn)(nil)
	_ net.PacketConn = (*polarnet.UDPConn)(nil)
)

// methodsOf returns the exported methods of typ by name.
func methodsOf(typ reflect.Type) map[string]reflect.Method {
	out := map[string]reflect.Method{}
	for i := range typ.NumMethod() {
		m := typ.Method(i)
		out[m.Name] = m
	}
	return out
}

// sameSignature compares two methods' types without their receivers.
func sameSignature(a, b reflect.Type) bool {
	if a.NumIn() != b.NumIn() || a.NumOut() != b.NumOut() || a.IsVariadic() != b.IsVariadic() {
		return false
	}
	for i := 1; i < a.NumIn(); i++ {
		if a.In(i) != b.In(i) {
			return false
		}
	}
	for i := range a.NumOut() {
		if a.Out(i) != b.Out(i) {
			return false
		}
	}
	return true
}

// checkMethods asserts that ours has every method in want with the
// signature it has on ref, and that what ref has beyond ours is exactly
// allowedMissing.
func checkMethods(t *testing.T, ours, ref reflect.Type, want []string, allowedMissing []string) {
	t.Helper()
	om, rm := methodsOf(ours), methodsOf(ref)
	for _, name := range want {
		o, ok := om[name]
		if !assert.True(t, ok, "%v lacks %s", ours, name) {
			continue
		}
		r, ok := rm[name]
		require.True(t, ok, "%v has no %s to compare with", ref, name)
		assert.True(t, sameSignature(o.Type, r.Type), "%v.%s is %v, %v's is %v", ours, name, o.Type, ref, r.Type)
	}
	var missing []string
	for name := range rm {
		if _, ok := om[name]; !ok {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	t.Logf("%v has %d methods; of %v's %d it lacks %v", ours, len(om), ref, len(rm), missing)
	assert.ElementsMatch(t, allowedMissing, missing, "methods of %v missing from %v", ref, ours)
}

func TestAPITCPConnMethodSet(t *testing.T) {
	checkMethods(t, reflect.TypeFor[*polarnet.TCPConn](), reflect.TypeFor[*net.TCPConn](),
		[]string{"Read", "Write", "Close", "CloseRead", "CloseWrite", "LocalAddr", "RemoteAddr",
			"SetDeadline", "SetReadDeadline", "SetWriteDeadline", "SetNoDelay", "SetKeepAlive",
			"SetKeepAlivePeriod", "SetKeepAliveConfig", "SetLinger", "SetReadBuffer", "SetWriteBuffer",
			"ReadFrom", "WriteTo", "MultipathTCP"},
		// File descriptors have no meaning on a userspace stack.
		[]string{"File", "SyscallConn"})
}

func TestAPITCPListenerMethodSet(t *testing.T) {
	// AcceptTCP returns *polarnet.TCPConn, not *net.TCPConn: checked below
	// by name only.
	checkMethods(t, reflect.TypeFor[*polarnet.TCPListener](), reflect.TypeFor[*net.TCPListener](),
		[]string{"Accept", "Close", "Addr", "SetDeadline"},
		[]string{"File", "SyscallConn"})
	m, ok := reflect.TypeFor[*polarnet.TCPListener]().MethodByName("AcceptTCP")
	require.True(t, ok)
	assert.Equal(t, reflect.TypeFor[*polarnet.TCPConn](), m.Type.Out(0))
}

func TestAPIUDPConnMethodSet(t *testing.T) {
	checkMethods(t, reflect.TypeFor[*polarnet.UDPConn](), reflect.TypeFor[*net.UDPConn](),
		[]string{"Read", "Write", "Close", "LocalAddr", "RemoteAddr", "ReadFrom", "WriteTo",
			"SetDeadline", "SetReadDeadline", "SetWriteDeadline", "SetReadBuffer", "SetWriteBuffer",
			"ReadFromUDP", "WriteToUDP", "ReadFromUDPAddrPort", "WriteToUDPAddrPort",
			"ReadMsgUDP", "ReadMsgUDPAddrPort", "WriteMsgUDP", "WriteMsgUDPAddrPort"},
		[]string{"File", "SyscallConn"})
}

func TestAPIDialerAndListenConfigFields(t *testing.T) {
	fields := func(typ reflect.Type) map[string]reflect.Type {
		out := map[string]reflect.Type{}
		for i := range typ.NumField() {
			out[typ.Field(i).Name] = typ.Field(i).Type
		}
		return out
	}
	ours, ref := fields(reflect.TypeFor[dialer.Dialer]()), fields(reflect.TypeFor[net.Dialer]())
	for _, name := range []string{"Timeout", "Deadline", "LocalAddr", "KeepAlive", "KeepAliveConfig", "Resolver",
		"FallbackDelay", "DualStack", "Control", "ControlContext"} {
		if assert.Contains(t, ours, name) {
			assert.Equal(t, ref[name], ours[name], "dialer.Dialer.%s", name)
		}
	}
	assert.Equal(t, reflect.TypeFor[*polarnet.Stack](), ours["Stack"])

	ours, ref = fields(reflect.TypeFor[listener.ListenConfig]()), fields(reflect.TypeFor[net.ListenConfig]())
	for _, name := range []string{"KeepAlive", "KeepAliveConfig", "Control"} {
		if assert.Contains(t, ours, name) {
			assert.Equal(t, ref[name], ours[name], "listener.ListenConfig.%s", name)
		}
	}
	assert.Equal(t, reflect.TypeFor[*polarnet.Stack](), ours["Stack"])
}

// TestAPIDynamicTypes checks what the values behind the interfaces are on
// live polarnet conns: addresses are *net.TCPAddr / *net.UDPAddr as with
// Go's net, conns are *polarnet.TCPConn / *polarnet.UDPConn, and the
// package-level Dialer and ListenConfig hand them out.
func TestAPIDynamicTypes(t *testing.T) {
	la, lb := pipe.New(pipe.Config{})
	client := newStack(t, la, "198.18.0.1/24")
	server := newStack(t, lb, "198.18.0.2/24")
	d := dialer.Dialer{Stack: client, Timeout: 5 * time.Second}
	lc := listener.ListenConfig{Stack: server}

	ln, err := lc.Listen(t.Context(), "tcp", "198.18.0.2:0")
	require.NoError(t, err)
	defer ln.Close()
	require.IsType(t, &polarnet.TCPListener{}, ln)
	require.IsType(t, &net.TCPAddr{}, ln.Addr())
	accepted := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); accepted <- c }()
	c, err := d.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	s := <-accepted
	require.NotNil(t, s)
	defer s.Close()
	for _, conn := range []net.Conn{c, s} {
		assert.IsType(t, &polarnet.TCPConn{}, conn)
		assert.IsType(t, &net.TCPAddr{}, conn.LocalAddr())
		assert.IsType(t, &net.TCPAddr{}, conn.RemoteAddr())
	}
	assert.Equal(t, c.LocalAddr().String(), s.RemoteAddr().String())
	assert.Equal(t, netip.MustParseAddr("198.18.0.2"), c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr())

	pc, err := lc.ListenPacket(t.Context(), "udp", "198.18.0.2:0")
	require.NoError(t, err)
	defer pc.Close()
	require.IsType(t, &polarnet.UDPConn{}, pc)
	require.IsType(t, &net.UDPAddr{}, pc.LocalAddr())
	uc, err := d.Dial("udp", pc.LocalAddr().String())
	require.NoError(t, err)
	defer uc.Close()
	require.IsType(t, &polarnet.UDPConn{}, uc)
	assert.IsType(t, &net.UDPAddr{}, uc.LocalAddr())
	assert.IsType(t, &net.UDPAddr{}, uc.RemoteAddr())
	_, err = uc.Write([]byte("ping"))
	require.NoError(t, err)
	require.NoError(t, pc.SetReadDeadline(time.Now().Add(5*time.Second)))
	buf := make([]byte, 16)
	n, from, err := pc.ReadFrom(buf)
	require.NoError(t, err)
	assert.Equal(t, "ping", string(buf[:n]))
	assert.IsType(t, &net.UDPAddr{}, from)
	assert.Equal(t, uc.LocalAddr().String(), from.String())
}

// TestDialLoopbackThroughTheKernel: with a stack, loopback and localhost are
// dialed with Go's net.
func TestDialLoopbackThroughTheKernel(t *testing.T) {
	la, _ := pipe.New(pipe.Config{})
	st := newStack(t, la, "198.19.40.1/24")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	d := dialer.Dialer{Stack: st, Timeout: 5 * time.Second}
	for _, addr := range []string{ln.Addr().String(), net.JoinHostPort("localhost", strconv.Itoa(port))} {
		c, err := d.Dial("tcp4", addr)
		require.NoError(t, err, addr)
		assert.IsType(t, &net.TCPConn{}, c, addr)
		c.Close()
	}
	assert.EqualValues(t, 2, st.Stats().KernelDials)
}
