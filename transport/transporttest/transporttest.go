package transporttest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/replicatorhq/replicator/transport"
)

// Option adjusts Run.
type Option func(*config)

type config struct {
	listenAddr string
	bubble     bool
}

// ListenAddr sets the address every case listens on; it must let the
// transport choose a free one (default "127.0.0.1:0"). Cases dial
// Listener.Addr().String().
func ListenAddr(addr string) Option { return func(c *config) { c.listenAddr = addr } }

// InBubble runs each case inside synctest.Test, creating the transport in
// the bubble. Only for transports without real sockets.
func InBubble() Option { return func(c *config) { c.bubble = true } }

// Run runs the conformance suite. newTransport is called once per case.
func Run(t *testing.T, newTransport func(t *testing.T) transport.Transport, opts ...Option) {
	cfg := config{listenAddr: "127.0.0.1:0"}
	for _, o := range opts {
		o(&cfg)
	}
	cases := []struct {
		name string
		fn   func(*testing.T, *harness)
	}{
		{"ListenDialAccept", testListenDialAccept},
		{"StreamBothWays", testStreamBothWays},
		{"FramesAndReports", testFramesAndReports},
		{"ManyConns", testManyConns},
		{"PeerCloseIsEOF", testPeerCloseIsEOF},
		{"LocalClose", testLocalClose},
		{"WriteAfterPeerClose", testWriteAfterPeerClose},
		{"ListenerClose", testListenerClose},
		{"DialErrors", testDialErrors},
		{"ReadDeadline", testReadDeadline},
		{"WriteDeadline", testWriteDeadline},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := func(t *testing.T) {
				h := &harness{t: t, tr: newTransport(t), addr: cfg.listenAddr}
				tc.fn(t, h)
			}
			if cfg.bubble {
				synctest.Test(t, body)
			} else {
				body(t)
			}
		})
	}
}

type harness struct {
	t    *testing.T
	tr   transport.Transport
	addr string
}

func (h *harness) listen() net.Listener {
	h.t.Helper()
	ln, err := h.tr.Listen(h.addr)
	if err != nil {
		h.t.Fatalf("Listen(%q): %v", h.addr, err)
	}
	if ln.Addr() == nil || ln.Addr().String() == "" {
		h.t.Fatal("listener has no address")
	}
	h.t.Cleanup(func() { ln.Close() })
	return ln
}

func (h *harness) dial(addr string) net.Conn {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := h.tr.Dial(ctx, addr)
	if err != nil {
		h.t.Fatalf("Dial(%q): %v", addr, err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

// pair returns a dialed and an accepted connection of one listener.
func (h *harness) pair(ln net.Listener) (dialed, accepted net.Conn) {
	h.t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	dialed = h.dial(ln.Addr().String())
	r := <-ch
	if r.err != nil {
		h.t.Fatalf("Accept: %v", r.err)
	}
	h.t.Cleanup(func() { r.c.Close() })
	return dialed, r.c
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && errors.Is(err, os.ErrDeadlineExceeded)
}

func testListenDialAccept(t *testing.T, h *harness) {
	ln := h.listen()
	c, s := h.pair(ln)
	for name, a := range map[string]net.Addr{
		"dialed local": c.LocalAddr(), "dialed remote": c.RemoteAddr(),
		"accepted local": s.LocalAddr(), "accepted remote": s.RemoteAddr(),
	} {
		if a == nil || a.String() == "" || a.Network() == "" {
			t.Errorf("%s address missing: %v", name, a)
		}
	}
	if _, err := h.tr.Listen(ln.Addr().String()); err == nil {
		t.Error("a second Listen on a bound address succeeded")
	}
}

// pattern returns n deterministic pseudo-random bytes.
func pattern(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// send writes data in pseudo-random chunk sizes.
func send(c net.Conn, data []byte, seed uint64) error {
	r := rand.New(rand.NewPCG(seed, 7))
	for len(data) > 0 {
		n := min(len(data), 1+r.IntN(70000))
		if _, err := c.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

func testStreamBothWays(t *testing.T, h *harness) {
	c, s := h.pair(h.listen())
	const n = 2 << 20
	up, down := pattern(1, n), pattern(2, n)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	gotUp, gotDown := make([]byte, n), make([]byte, n)
	wg.Add(4)
	go func() { defer wg.Done(); errs <- send(c, up, 3) }()
	go func() { defer wg.Done(); errs <- send(s, down, 4) }()
	go func() { defer wg.Done(); _, err := io.ReadFull(s, gotUp); errs <- err }()
	go func() { defer wg.Done(); _, err := io.ReadFull(c, gotDown); errs <- err }()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(gotUp, up) || !bytes.Equal(gotDown, down) {
		t.Fatal("bytes changed in transit")
	}
}

func testFramesAndReports(t *testing.T, h *harness) {
	slave, master := h.pair(h.listen())
	bodies := [][]byte{pattern(5, transport.DefaultBatchSize), nil, pattern(6, 100), pattern(7, 1)}
	errc := make(chan error, 1)
	go func() {
		rr := transport.NewReportReader(master)
		if req, err := rr.Next(); err != nil || req != 0 {
			errc <- errors.Join(err, errors.New("bad request report"))
			return
		}
		fw := transport.NewFrameWriter(master)
		var off int64
		for _, b := range bodies {
			if err := fw.WriteFrame(off, b); err != nil {
				errc <- err
				return
			}
			off += int64(len(b))
		}
		for {
			ack, err := rr.Next()
			if err != nil {
				errc <- err
				return
			}
			if ack == off {
				errc <- nil
				return
			}
		}
	}()
	rw := transport.NewReportWriter(slave)
	if err := rw.WriteReport(0); err != nil {
		t.Fatal(err)
	}
	fr := transport.NewFrameReader(slave, transport.DefaultBatchSize)
	var off int64
	for i, want := range bodies {
		f, err := fr.Next()
		if err != nil {
			t.Fatal(err)
		}
		if f.Offset != off || !bytes.Equal(f.Body, want) {
			t.Fatalf("frame %d: offset %d len %d, want %d len %d", i, f.Offset, len(f.Body), off, len(want))
		}
		off = f.End()
		if err := rw.WriteReport(off); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func testManyConns(t *testing.T, h *harness) {
	ln := h.listen()
	const conns = 4
	var wg sync.WaitGroup
	errc := make(chan error, 2*conns)
	wg.Add(1)
	go func() { // echo server
		defer wg.Done()
		for i := 0; i < conns; i++ {
			s, err := ln.Accept()
			if err != nil {
				errc <- err
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer s.Close()
				_, err := io.Copy(s, s)
				errc <- err
			}()
		}
	}()
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := h.tr.Dial(ctx, ln.Addr().String())
			if err != nil {
				errc <- err
				return
			}
			defer c.Close()
			data := pattern(uint64(10+i), 64<<10)
			go send(c, data, uint64(i))
			got := make([]byte, len(data))
			if _, err := io.ReadFull(c, got); err != nil {
				errc <- err
				return
			}
			if !bytes.Equal(got, data) {
				errc <- errors.New("echo differs")
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func testPeerCloseIsEOF(t *testing.T, h *harness) {
	ln := h.listen()
	for _, dir := range []string{"dialed closes", "accepted closes"} {
		c, s := h.pair(ln)
		if dir == "accepted closes" {
			c, s = s, c
		}
		data := pattern(9, 100<<10)
		go func() {
			send(c, data, 1)
			c.Close()
		}()
		got, err := io.ReadAll(s)
		if err != nil {
			t.Fatalf("%s: ReadAll: %v", dir, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%s: got %d bytes before EOF, want %d", dir, len(got), len(data))
		}
		if n, err := s.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("%s: read after EOF: %d %v", dir, n, err)
		}
	}
}

func testLocalClose(t *testing.T, h *harness) {
	c, s := h.pair(h.listen())
	errc := make(chan error, 1)
	go func() {
		_, err := s.Read(make([]byte, 10))
		errc <- err
	}()
	// The peer sends nothing: whether the Read above is already blocked or
	// starts after it, only this Close can end it.
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("blocked Read after Close: %v, want net.ErrClosed", err)
	}
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	if _, err := s.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	s.Close() // a second Close must not panic
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("peer of a closed conn reads %d %v, want io.EOF", n, err)
	}
}

func testWriteAfterPeerClose(t *testing.T, h *harness) {
	c, s := h.pair(h.listen())
	s.Close()
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("read after peer close: %d %v", n, err)
	}
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 32<<10)
	for i := 0; ; i++ {
		_, err := c.Write(buf)
		if err != nil {
			if isTimeout(err) {
				t.Fatal("writes to a closed peer never failed")
			}
			break
		}
	}
}

func testListenerClose(t *testing.T, h *harness) {
	ln := h.listen()
	c, s := h.pair(ln)
	errc := make(chan error, 1)
	go func() {
		_, err := ln.Accept()
		errc <- err
	}()
	if err := ln.Close(); err != nil {
		t.Fatalf("listener Close: %v", err)
	}
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("blocked Accept after Close: %v, want net.ErrClosed", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c2, err := h.tr.Dial(ctx, ln.Addr().String()); err == nil {
		c2.Close()
		t.Fatal("Dial to a closed listener succeeded")
	}
	// Connections already accepted keep working.
	go c.Write([]byte("still here"))
	got := make([]byte, 10)
	if _, err := io.ReadFull(s, got); err != nil || string(got) != "still here" {
		t.Fatalf("accepted conn after listener close: %q %v", got, err)
	}
}

func testDialErrors(t *testing.T, h *harness) {
	ln := h.listen()
	addr := ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if c, err := h.tr.Dial(ctx, addr); err == nil {
		c.Close()
		t.Fatal("Dial with a cancelled ctx succeeded")
	} else if !errors.Is(err, context.Canceled) {
		t.Fatalf("Dial with a cancelled ctx: %v, want context.Canceled", err)
	}
	ln.Close()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c, err := h.tr.Dial(ctx, addr); err == nil {
		c.Close()
		t.Fatal("Dial with nobody listening succeeded")
	}
}

func testReadDeadline(t *testing.T, h *harness) {
	c, s := h.pair(h.listen())
	buf := make([]byte, 16)

	// A deadline in the past fails at once.
	s.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := s.Read(buf); !isTimeout(err) {
		t.Fatalf("past deadline: %v", err)
	}
	// A short deadline expires while blocked.
	s.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := s.Read(buf); !isTimeout(err) {
		t.Fatalf("short deadline: %v", err)
	}
	// The connection still works after a timeout, deadline cleared.
	s.SetReadDeadline(time.Time{})
	go c.Write([]byte("after timeout"))
	if _, err := io.ReadFull(s, buf[:13]); err != nil || string(buf[:13]) != "after timeout" {
		t.Fatalf("read after timeout: %q %v", buf[:13], err)
	}
	// Moving the deadline while a Read is blocked takes effect.
	s.SetReadDeadline(time.Now().Add(time.Hour))
	errc := make(chan error, 1)
	go func() {
		_, err := s.Read(buf)
		errc <- err
	}()
	s.SetDeadline(time.Now().Add(10 * time.Millisecond))
	if err := <-errc; !isTimeout(err) {
		t.Fatalf("deadline moved while blocked: %v", err)
	}
}

func testWriteDeadline(t *testing.T, h *harness) {
	c, _ := h.pair(h.listen())
	c.SetWriteDeadline(time.Now().Add(-time.Second))
	if _, err := c.Write([]byte("x")); !isTimeout(err) {
		t.Fatalf("past write deadline: %v", err)
	}
	// The peer never reads: a Write must block once buffers fill, then
	// time out.
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	buf := make([]byte, 256<<10)
	for total := 0; ; total += len(buf) {
		if _, err := c.Write(buf); err != nil {
			if !isTimeout(err) {
				t.Fatalf("write to a stalled peer: %v", err)
			}
			break
		}
		if total > 1<<30 {
			t.Fatal("1 GiB written to a peer that never reads")
		}
	}
}
