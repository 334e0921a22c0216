package tcptransport

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/replicatorhq/replicator/internal/node/testpki"
	"github.com/replicatorhq/replicator/transport"
	"github.com/replicatorhq/replicator/transport/transporttest"
)

// logBuf is a concurrency-safe log sink.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// count returns the number of lines containing every one of subs.
func (l *logBuf) count(subs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range strings.Split(l.b.String(), "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			n++
		}
	}
	return n
}

func (l *logBuf) logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: l, DisableTime: true})
}

// dialFrom connects to addr from the local address ip (any 127.0.0.0/8
// address works on loopback), so one test can be several peers.
func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", ip, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// acceptOne accepts the next connection with a deadline.
func acceptOne(t *testing.T, ln net.Listener) net.Conn {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("accept: %v", r.err)
		}
		t.Cleanup(func() { r.c.Close() })
		return r.c
	case <-time.After(10 * time.Second):
		t.Fatal("nothing accepted")
	}
	return nil
}

// waitClosed fails unless the server closes c (EOF or reset) before the
// deadline; it sends nothing.
func waitClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if err == nil {
		t.Fatal("read data from a connection that should be closed")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection not closed by the server: %v", err)
	}
}

func TestParseAllow(t *testing.T) {
	got, err := ParseAllow([]string{" 10.0.0.7 ", "10.1.2.3/16", "fd00::1", "::ffff:192.168.0.0/112", ""})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.7/32", "10.1.0.0/16", "fd00::1/128", "192.168.0.0/16"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	for _, bad := range []string{"10.0.0.300", "host.example", "10.0.0.0/33", "::ffff:1.2.3.4/64"} {
		if _, err := ParseAllow([]string{bad}); err == nil {
			t.Errorf("ParseAllow(%q) accepted", bad)
		}
	}
	o := Options{Security: transport.Security{Allow: got}}
	for addr, ok := range map[string]bool{"10.0.0.7": true, "10.0.0.8": false, "10.1.200.1": true, "::ffff:10.1.0.1": true, "fd00::1": true, "fd00::2": false} {
		if o.allowed(netip.MustParseAddr(addr)) != ok {
			t.Errorf("allowed(%s) != %v", addr, ok)
		}
	}
}

func TestAllowListRefusesUnlistedPeer(t *testing.T) {
	var logs logBuf
	reg := prometheus.NewRegistry()
	tr := New(Options{Security: transport.Security{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, Logger: logs.logger(), Registerer: reg})
	ln, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	// 127.0.0.2 is "another host" on loopback: refused at accept, without
	// a byte read, with one warning and a count.
	stranger := dialFrom(t, "127.0.0.2", ln.Addr().String())
	friend := dialFrom(t, "127.0.0.1", ln.Addr().String())
	acc := acceptOne(t, ln) // Accept skips the stranger and returns the friend
	if got := acc.RemoteAddr().(*net.TCPAddr).IP.String(); got != "127.0.0.1" {
		t.Fatalf("accepted %s", got)
	}
	waitClosed(t, stranger)
	if n := logs.count("refusing HA connection", "127.0.0.2", "reason="+RefusedNotAllowed); n != 1 {
		t.Fatalf("%d refusal lines for the stranger, want 1:\n%s", n, logs.b.String())
	}
	if v := testutil.ToFloat64(tr.refused.WithLabelValues(RefusedNotAllowed)); v != 1 {
		t.Fatalf("refused{not_allowed} = %v", v)
	}
	// The friend speaks the classic bytes unchanged.
	replicate(t, friend, acc)
}

func TestConnectionLimits(t *testing.T) {
	var logs logBuf
	reg := prometheus.NewRegistry()
	tr := New(Options{Security: transport.Security{MaxConns: 3, MaxConnsPerIP: 2}, Logger: logs.logger(), Registerer: reg})
	ln, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()

	a1 := dialFrom(t, "127.0.0.1", addr)
	s1 := acceptOne(t, ln)
	dialFrom(t, "127.0.0.1", addr)
	acceptOne(t, ln)
	over := dialFrom(t, "127.0.0.1", addr) // third from .1: over the per-IP limit
	dialFrom(t, "127.0.0.2", addr)         // total 3
	if ip := acceptOne(t, ln).RemoteAddr().(*net.TCPAddr).IP.String(); ip != "127.0.0.2" {
		t.Fatalf("accepted %s, want 127.0.0.2", ip)
	}
	waitClosed(t, over)
	full := dialFrom(t, "127.0.0.3", addr) // over the total
	// The accept loop must see it before we can check; accept in the
	// background while waiting for its close.
	bg := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			bg <- c
		}
		close(bg)
	}()
	waitClosed(t, full)
	if v := testutil.ToFloat64(tr.open); v != 3 {
		t.Fatalf("open connections %v, want 3", v)
	}
	if n1, n2 := testutil.ToFloat64(tr.refused.WithLabelValues(RefusedMaxConnsPerIP)), testutil.ToFloat64(tr.refused.WithLabelValues(RefusedMaxConns)); n1 != 1 || n2 != 1 {
		t.Fatalf("refused per_ip=%v total=%v", n1, n2)
	}
	if logs.count("refusing HA connection") != 2 {
		t.Fatalf("want 2 refusal lines:\n%s", logs.b.String())
	}

	// Closing an accepted connection frees its place: .1 may connect again.
	s1.Close()
	waitClosed(t, a1)
	if v := testutil.ToFloat64(tr.open); v != 2 {
		t.Fatalf("open connections %v after a close, want 2", v)
	}
	again := dialFrom(t, "127.0.0.1", addr)
	var acc net.Conn
	select {
	case acc = <-bg:
	case <-time.After(10 * time.Second):
		t.Fatal("the freed place was not given to a new connection")
	}
	if acc == nil {
		t.Fatal("accept failed")
	}
	defer acc.Close()
	replicate(t, again, acc)

	// A tracked connection still gets writev from net.Buffers: Write is
	// not called when the promoted vectored-write method is found.
	if _, ok := acc.(*trackedConn); !ok {
		t.Fatalf("accepted %T", acc)
	}
}

func TestTCPConformanceWithLimits(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transport.Transport {
		return New(Options{Security: transport.Security{MaxConns: 64, MaxConnsPerIP: 32, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}})
	})
}

func TestAllowClientNames(t *testing.T) {
	ca := testpki.NewCA(t, "test CA")
	srv := ca.Server(t, "master")
	var logs logBuf
	reg := prometheus.NewRegistry()
	tr := New(Options{
		Security: transport.Security{
			ServerTLS: &tls.Config{
				Certificates: []tls.Certificate{srv.TLS}, ClientCAs: ca.Pool,
				ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
			},
			AllowClientNames: []string{"slave-1", "slave-2.example"},
		},
		Logger: logs.logger(), Registerer: reg,
	})
	ln, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// dial connects with cert. A refused certificate shows as an error of
	// the handshake or, with TLS 1.3, of the first read.
	dial := func(cert testpki.Leaf, refused bool) (net.Conn, error) {
		cli := New(Options{Security: transport.Security{ClientTLS: &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{cert.TLS}}}})
		c, err := cli.Dial(context.Background(), ln.Addr().String())
		if err != nil || !refused {
			return c, err
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, nil // not refused: the test fails
		}
		if err == nil || errors.Is(err, io.EOF) {
			err = errors.New("closed by the server")
		}
		return nil, err
	}
	for _, tc := range []struct {
		name string
		cert testpki.Leaf
		ok   bool
	}{
		{"common name", ca.Client(t, "slave-1"), true},
		{"DNS name", ca.Client(t, "whatever", "slave-2.example"), true},
		{"other name", ca.Client(t, "intruder", "intruder.example"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			accepted := make(chan net.Conn, 1)
			if tc.ok {
				go func() {
					c, err := ln.Accept()
					if err == nil {
						accepted <- c
					}
				}()
			}
			c, err := dial(tc.cert, !tc.ok)
			if tc.ok != (err == nil) {
				t.Fatalf("dial: %v, want ok=%v", err, tc.ok)
			}
			if !tc.ok {
				t.Logf("refused: %v", err)
				return
			}
			defer c.Close()
			s := <-accepted
			defer s.Close()
			replicate(t, c, s)
		})
	}
	// Close waits for the handshake goroutines, so the refusal is logged.
	ln.Close()
	if n := logs.count("TLS handshake failed", "not in the allowed client names"); n != 1 {
		t.Fatalf("%d handshake failure lines, want 1:\n%s", n, logs.b.String())
	}
	if v := testutil.ToFloat64(tr.handshakeErr); v != 1 {
		t.Fatalf("handshake errors %v", v)
	}
}

func TestValidateSecurityOptions(t *testing.T) {
	for _, s := range []transport.Security{
		{MaxConns: -1},
		{MaxConnsPerIP: -1},
		{Allow: []netip.Prefix{{}}},
		{AllowClientNames: []string{"x"}},
		{AllowClientNames: []string{"x"}, ServerTLS: &tls.Config{Certificates: []tls.Certificate{{}}}},
	} {
		o := Options{Security: s}
		if err := o.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", o)
		}
	}
}
