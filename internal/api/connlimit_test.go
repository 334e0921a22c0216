package api

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// floodConns opens n keep-alive connections from the local address from
// (127.0.0.x) to addr, each with one answered request, so that the server
// sees them idle; it returns them (some already closed by the server) for
// the caller to close. Bounded: 8 goroutines, every dial and read with a
// deadline.
func floodConns(t *testing.T, from, addr string, n int) []net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				c, err := d.Dial("tcp", addr)
				if err != nil {
					continue
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
					continue
				}
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	return conns
}

// getStatus sends GET /v1/status on a new connection from the local
// address from and returns the status code or the error.
func getStatus(from, addr string) (int, error) {
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}).DialContext, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/v1/status")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func closeAll(cs []net.Conn) {
	for _, c := range cs {
		c.Close()
	}
}

// TestAPIFloodOfIdleConnsDoesNotLockOut: 2000 idle keep-alive connections
// from one address (127.0.0.2) while a legitimate client (127.0.0.1, and
// then a new connection from the flooding address itself) asks for its
// status: it gets through, the flood holds at most the per-address cap,
// and the idle flood connections are what gets closed.
func TestAPIFloodOfIdleConnsDoesNotLockOut(t *testing.T) {
	lim := DefaultServerLimits(time.Second)
	lim.MaxConns, lim.MaxConnsPerIP = 100, 40
	as := startAbuseServer(t, "", lim)
	if c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).Dial("tcp", as.addr); err != nil {
		t.Skipf("cannot connect from 127.0.0.2 on this machine: %v", err)
	} else {
		c.Close()
	}

	var flood []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		flood = floodConns(t, "127.0.0.2", as.addr, 2000)
	}()
	// During the flood, from another address.
	for i := 0; i < 5; i++ {
		if code, err := getStatus("127.0.0.1", as.addr); err != nil || code != 200 {
			t.Errorf("status during the flood: %d %v", code, err)
		}
	}
	<-done
	defer closeAll(flood)
	// After it, from another address and from the flooding one.
	for _, from := range []string{"127.0.0.1", "127.0.0.2"} {
		if code, err := getStatus(from, as.addr); err != nil || code != 200 {
			t.Errorf("status from %s after the flood: %d %v", from, code, err)
		}
	}
	ll := as.ln.(*limitListener)
	ll.mu.Lock()
	open, fromFlood := len(ll.conns), ll.byIP[netip.MustParseAddr("127.0.0.2")]
	ll.mu.Unlock()
	if fromFlood > 40 || open > 100 {
		t.Errorf("open connections %d (flood %d), over the caps", open, fromFlood)
	}
	if got := testutil.ToFloat64(ll.evicted); got < 2000-40 {
		t.Errorf("evicted %v idle connections, want at least %d", got, 2000-40)
	}
}

// TestAPITotalCapClosesIdleFirst: with only the total cap (the issue's
// case: 1024 held, the rest refused, a new client reset), a new
// connection closes the longest-idle one instead of being refused.
func TestAPITotalCapClosesIdleFirst(t *testing.T) {
	lim := DefaultServerLimits(time.Second)
	lim.MaxConns, lim.MaxConnsPerIP = 50, 0
	as := startAbuseServer(t, "", lim)
	flood := floodConns(t, "127.0.0.1", as.addr, 2000)
	defer closeAll(flood)
	if code, err := getStatus("127.0.0.1", as.addr); err != nil || code != 200 {
		t.Fatalf("status after the flood: %d %v", code, err)
	}
	ll := as.ln.(*limitListener)
	if got := testutil.ToFloat64(ll.refused.WithLabelValues("total")); got != 0 {
		t.Errorf("refused %v connections; idle ones should have been closed instead", got)
	}
}

// TestAPICapRefusesWhenNothingIsIdle: connections that are busy (a request
// in progress) or just opened are never closed for a newcomer: it is
// refused, counted, and the held connections still work.
func TestAPICapRefusesWhenNothingIsIdle(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lln, err := LimitListenerPerIP(ln, 0, 2, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer lln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := lln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		sc := <-accepted
		defer sc.Close()
		trackConnState(sc, http.StateActive)
	}
	defer closeAll(held)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("third connection not closed")
	}
	want := `
# HELP replicator_http_refused_connections_total API connections closed at accept because a connection limit was reached with no idle connection to close instead, by limit: total (--api-max-conns) or per_ip (--api-max-conns-per-ip).
# TYPE replicator_http_refused_connections_total counter
replicator_http_refused_connections_total{reason="per_ip"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "replicator_http_refused_connections_total"); err != nil {
		t.Fatal(err)
	}
	for i, h := range held {
		if _, err := fmt.Fprint(h, "x"); err != nil {
			t.Fatalf("held connection %d: %v", i, err)
		}
	}
}
