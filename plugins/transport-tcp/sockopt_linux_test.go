//go:build linux

package tcptransport

import (
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestTCPSocketOptions(t *testing.T) {
	opts := DefaultOptions()
	opts.SendBufferSize = 256 << 10
	opts.ReceiveBufferSize = 128 << 10
	tr := New(opts)
	ln, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if v := sockopt(t, ln.(syscall.Conn), unix.SOL_SOCKET, unix.SO_REUSEADDR); v == 0 {
		t.Error("listener SO_REUSEADDR off")
	}
	c, s := pair(t, tr, tr)
	for name, conn := range map[string]net.Conn{"dialed": c, "accepted": s} {
		sc := conn.(syscall.Conn)
		if v := sockopt(t, sc, unix.IPPROTO_TCP, unix.TCP_NODELAY); v == 0 {
			t.Errorf("%s: TCP_NODELAY off", name)
		}
		if v := sockopt(t, sc, unix.SOL_SOCKET, unix.SO_KEEPALIVE); v == 0 {
			t.Errorf("%s: SO_KEEPALIVE off", name)
		}
		if v := sockopt(t, sc, unix.SOL_SOCKET, unix.SO_SNDBUF); v < opts.SendBufferSize {
			t.Errorf("%s: SO_SNDBUF %d < %d", name, v, opts.SendBufferSize)
		}
		if v := sockopt(t, sc, unix.SOL_SOCKET, unix.SO_RCVBUF); v < opts.ReceiveBufferSize {
			t.Errorf("%s: SO_RCVBUF %d < %d", name, v, opts.ReceiveBufferSize)
		}
		var l *unix.Linger
		raw, _ := sc.SyscallConn()
		raw.Control(func(fd uintptr) { l, err = unix.GetsockoptLinger(int(fd), unix.SOL_SOCKET, unix.SO_LINGER) })
		if err != nil || l.Onoff != 0 {
			t.Errorf("%s: SO_LINGER %+v %v, want off", name, l, err)
		}
	}
	// Nagle back on when asked.
	opts = DefaultOptions()
	opts.DisableNoDelay = true
	tr = New(opts)
	c, _ = pair(t, tr, tr)
	if v := sockopt(t, c.(syscall.Conn), unix.IPPROTO_TCP, unix.TCP_NODELAY); v != 0 {
		t.Error("DisableNoDelay: TCP_NODELAY still on")
	}
}

func sockopt(t *testing.T, sc syscall.Conn, level, opt int) int {
	t.Helper()
	raw, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := raw.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), level, opt) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatalf("getsockopt %d/%d: %v", level, opt, gerr)
	}
	return v
}
