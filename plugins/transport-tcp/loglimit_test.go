package tcptransport

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/replicatorhq/replicator/transport"
)

// fakeNow is a settable clock.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeNow) add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

// TestRefusalWarningsAreRateLimited: a burst of refused connections from
// one address logs one WARN line (with what the refusal means), the next
// line after RefusalLogInterval says how many were suppressed, another
// address gets its own line, and the metric counts every refusal.
func TestRefusalWarningsAreRateLimited(t *testing.T) {
	var logs logBuf
	reg := prometheus.NewRegistry()
	tr := New(Options{Security: transport.Security{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, Logger: logs.logger(), Registerer: reg})
	clk := &fakeNow{t: time.Unix(1_700_000_000, 0)}
	tr.logLimit = newLogLimiter(RefusalLogInterval, clk.now)
	ln, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
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
	refuse := func(from string, n int) {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		for range n {
			// The refusal resets the connection, possibly before the
			// dial returns.
			if c, err := d.Dial("tcp", ln.Addr().String()); err == nil {
				waitClosed(t, c)
				c.Close()
			}
		}
	}
	waitCount := func(want float64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for testutil.ToFloat64(tr.refused.WithLabelValues(RefusedNotAllowed)) != want {
			if time.Now().After(deadline) {
				t.Fatalf("refused{not_allowed} = %v, want %v", testutil.ToFloat64(tr.refused.WithLabelValues(RefusedNotAllowed)), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	refuse("127.0.0.2", 50)
	waitCount(50)
	if n := logs.count("refusing HA connection", "127.0.0.2"); n != 1 {
		t.Fatalf("%d refusal lines for a burst of 50, want 1:\n%s", n, logs.b.String())
	}
	if n := logs.count("refusing HA connection", "not in --ha-allow", "suppressed=0"); n != 1 {
		t.Fatalf("first line lacks the hint or the count:\n%s", logs.b.String())
	}
	refuse("127.0.0.3", 1)
	waitCount(51)
	if n := logs.count("refusing HA connection", "127.0.0.3"); n != 1 {
		t.Fatalf("another address: %d lines, want 1", n)
	}
	clk.add(RefusalLogInterval)
	refuse("127.0.0.2", 1)
	waitCount(52)
	if n := logs.count("refusing HA connection", "127.0.0.2", "suppressed=49"); n != 1 {
		t.Fatalf("no line reporting the 49 suppressed refusals:\n%s", logs.b.String())
	}
}

func TestLogLimiterBoundsKeys(t *testing.T) {
	clk := &fakeNow{t: time.Unix(0, 0)}
	l := newLogLimiter(time.Second, clk.now)
	for i := range maxLimiterKeys + 100 {
		l.allow(net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)).String())
	}
	if len(l.keys) > maxLimiterKeys+1 {
		t.Fatalf("%d keys remembered", len(l.keys))
	}
	// Past the bound, new addresses share one key: one line per interval.
	if ok, _ := l.allow("192.0.2.1"); ok {
		t.Fatal("a new address past the bound logged within the interval")
	}
	clk.add(time.Second)
	if ok, _ := l.allow("192.0.2.2"); !ok {
		t.Fatal("nothing logged after the interval")
	}
}
