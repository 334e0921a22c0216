package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type healthLogBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *healthLogBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *healthLogBuf) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), sub)
}

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func hdo(s http.Handler, method, target, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(method, target, strings.NewReader(body)))
	return rec
}

// TestAPIDiskFull: a put failing with ENOSPC answers 507 with a JSON
// message (not 500), /readyz answers 503 "disk full" for DiskFullHold, the
// ERROR line is logged once per PutErrorLogInterval with a count of the
// suppressed ones, the metrics count it, and a put that succeeds again
// ends the state at once.
func TestAPIDiskFull(t *testing.T) {
	b := newFake()
	enospc := fmt.Errorf("commitlog: append: roll: %w", &os.PathError{Op: "fallocate", Path: "/data/commitlog/00000000000000262144", Err: syscall.ENOSPC})
	b.putErr = enospc
	clk := &testClock{t: time.Unix(1_700_000_000, 0)}
	var logs healthLogBuf
	s, reg := newTestServer(t, b, func(c *Config) {
		c.Now = clk.now
		c.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	})
	s.SetReady(true)
	if rec := hdo(s, "GET", "/readyz", ""); rec.Code != 200 {
		t.Fatalf("readyz before: %d", rec.Code)
	}
	for range 100 {
		rec := hdo(s, "POST", "/v1/topics/T/messages", "x")
		var ea ErrorAnswer
		if rec.Code != http.StatusInsufficientStorage || json.Unmarshal(rec.Body.Bytes(), &ea) != nil || !strings.Contains(ea.Error, "disk is full") {
			t.Fatalf("put on a full disk: %d %s", rec.Code, rec.Body)
		}
	}
	if n := logs.count("put failed"); n != 1 {
		t.Fatalf("%d ERROR lines for 100 failed puts, want 1:\n%s", n, logs.b.String())
	}
	rec := hdo(s, "GET", "/readyz", "")
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), `"disk full"`) {
		t.Fatalf("readyz on a full disk: %d %s", rec.Code, rec.Body)
	}
	if v := testutil.ToFloat64(s.health.diskFull); v != 1 {
		t.Fatalf("disk_full gauge %v", v)
	}
	if v := testutil.ToFloat64(s.health.diskFullPuts); v != 100 {
		t.Fatalf("disk_full_puts_total %v", v)
	}
	if n, err := testutil.GatherAndCount(reg, "replicator_http_disk_full", "replicator_http_disk_full_puts_total"); err != nil || n != 2 {
		t.Fatalf("metrics registered: %d %v", n, err)
	}
	// After the interval, the next failure is logged with the count.
	clk.add(PutErrorLogInterval)
	hdo(s, "POST", "/v1/topics/T/messages", "x")
	if n := logs.count("suppressed=99"); n != 1 {
		t.Fatalf("no line with the 99 suppressed failures:\n%s", logs.b.String())
	}
	// The hold ends DiskFullHold after the last failure...
	clk.add(DiskFullHold)
	if rec := hdo(s, "GET", "/readyz", ""); rec.Code != 200 {
		t.Fatalf("readyz after the hold: %d %s", rec.Code, rec.Body)
	}
	if v := testutil.ToFloat64(s.health.diskFull); v != 0 {
		t.Fatalf("disk_full gauge %v after the hold", v)
	}
	// ... and at once when a put is stored again (room is back).
	hdo(s, "POST", "/v1/topics/T/messages", "x")
	if rec := hdo(s, "GET", "/readyz", ""); rec.Code != 503 {
		t.Fatalf("readyz right after a failure: %d", rec.Code)
	}
	b.putErr = nil
	if rec := hdo(s, "POST", "/v1/topics/T/messages", "x"); rec.Code != 200 {
		t.Fatalf("put with room again: %d %s", rec.Code, rec.Body)
	}
	if rec := hdo(s, "GET", "/readyz", ""); rec.Code != 200 {
		t.Fatalf("readyz after a stored put: %d %s", rec.Code, rec.Body)
	}
	// Other 5xx failures are rate-limited too, on their own.
	b.putErr = fmt.Errorf("commitlog: append: %w", syscall.EIO)
	for range 10 {
		if rec := hdo(s, "POST", "/v1/topics/T/messages", "x"); rec.Code != 500 {
			t.Fatalf("EIO put: %d", rec.Code)
		}
	}
	if n := logs.count("kind=other"); n != 1 {
		t.Fatalf("%d lines for 10 EIO failures, want 1", n)
	}
	if rec := hdo(s, "GET", "/readyz", ""); rec.Code != 200 {
		t.Fatalf("readyz after EIO: %d", rec.Code)
	}
}

func TestIsDiskFull(t *testing.T) {
	for err, want := range map[error]bool{
		nil:                                 false,
		syscall.ENOSPC:                      true,
		fmt.Errorf("x: %w", syscall.EDQUOT): true,
		fmt.Errorf("plugin: write /d/x: no space left on device"): true,
		syscall.EIO: false,
	} {
		if got := IsDiskFull(err); got != want {
			t.Errorf("IsDiskFull(%v) = %v", err, got)
		}
	}
}

type followBackend struct {
	*fakeBackend
	link *MasterLink
}

func (f *followBackend) Status() Status { return Status{Role: "SLAVE", Master: f.link} }

// TestAPIReadyzFollowing: /readyz stays 200 on a slave that lost its master
// (it still serves reads), /readyz?following answers 503 "not following"
// until it is connected again, and on a master ?following is 200.
func TestAPIReadyzFollowing(t *testing.T) {
	fb := &followBackend{fakeBackend: newFake(), link: &MasterLink{Addr: "10.0.0.1:10912", Connected: true, LastFrameMsAgo: 12}}
	s, err := New(Config{Backend: fb})
	if err != nil {
		t.Fatal(err)
	}
	s.SetReady(true)
	rec := hdo(s, "GET", "/readyz?following", "")
	var ra ReadyAnswer
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &ra) != nil || ra.Status != "following" || ra.Master != "10.0.0.1:10912" {
		t.Fatalf("connected slave: %d %s", rec.Code, rec.Body)
	}
	fb.link = &MasterLink{Addr: "10.0.0.1:10912", Connected: false, LastError: "connection refused", LastFrameMsAgo: 30000}
	if rec := hdo(s, "GET", "/readyz", ""); rec.Code != 200 {
		t.Fatalf("plain readyz of a slave without master: %d", rec.Code)
	}
	rec = hdo(s, "GET", "/readyz?following", "")
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), `"not following"`) || !strings.Contains(rec.Body.String(), "connection refused") {
		t.Fatalf("disconnected slave: %d %s", rec.Code, rec.Body)
	}
	// Connected but refusing to replicate (autoswitch: no consistent
	// point, or heartbeats only) or stopped on a segment mismatch: not
	// following either.
	for _, link := range []*MasterLink{
		{Addr: "10.0.0.1:10912", Connected: true, Unhealthy: "no consistent point with the master"},
		{Addr: "10.0.0.1:10912", Connected: true, SegmentError: "frame crosses the slave's segment end"},
	} {
		fb.link = link
		if rec := hdo(s, "GET", "/readyz?following", ""); rec.Code != 503 || !strings.Contains(rec.Body.String(), "not replicating") {
			t.Fatalf("connected, not replicating (%+v): %d %s", link, rec.Code, rec.Body)
		}
	}
	if rec := hdo(s, "GET", "/readyz?bogus", ""); rec.Code != 400 {
		t.Fatalf("unknown parameter: %d", rec.Code)
	}
	m, _ := newTestServer(t, newFake(), nil)
	m.SetReady(true)
	if rec := hdo(m, "GET", "/readyz?following", ""); rec.Code != 200 {
		t.Fatalf("master ?following: %d %s", rec.Code, rec.Body)
	}
}
