package core

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const testMasterAddr = "master:10912"

// startMaster starts a master on tr at testMasterAddr.
func startMaster(t *testing.T, st *memStore, tr *pipeTransport, cfg MasterConfig) *Master {
	t.Helper()
	cfg.ListenAddr = testMasterAddr
	if cfg.Logger == nil {
		cfg.Logger, _ = newTestLogger(t)
	}
	m, err := NewMaster(st, tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	return m
}

func dial(t *testing.T, tr *pipeTransport) net.Conn {
	t.Helper()
	c, err := tr.Dial(context.Background(), testMasterAddr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// expectClosed reads from c until the master closes it and returns the
// bytes read before.
func expectClosed(t *testing.T, c net.Conn) []byte {
	t.Helper()
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read until close: %v", err)
	}
	return b
}

func TestCoreMasterSilentBeforeFirstReportThenIdleClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1 << 20)
		st.fill(t, 0, 5000)
		tr := newPipeTransport()
		log, lb := newTestLogger(t)
		m := startMaster(t, st, tr, MasterConfig{Logger: log})
		defer m.Close()
		c := dial(t, tr)
		defer c.Close()
		start := time.Now()
		// No frame, not even a heartbeat, before the first report; the
		// master closes the link after 20 s without reading anything.
		if got := expectClosed(t, c); len(got) != 0 {
			t.Fatalf("master sent %d bytes before the first report", len(got))
		}
		if d := time.Since(start); d != DefaultHousekeepingInterval {
			t.Fatalf("idle close after %v, want %v", d, DefaultHousekeepingInterval)
		}
		synctest.Wait()
		if n := lb.count("closing idle slave connection"); n != 1 {
			t.Fatalf("%d idle-close log lines, want 1", n)
		}
		if s := m.Status().Slaves; len(s) != 0 {
			t.Fatalf("closed connection still listed: %+v", s)
		}
	})
}

func TestCoreMasterStartOffset(t *testing.T) {
	const seg = 64 << 10
	const max = 3*seg + 8292 // four segments, the last partly written
	cases := []struct {
		name       string
		request    int64
		firstSeg   bool
		wantOffset int64
		wantSize   int // 0: heartbeat only
		outOfRange bool
		logMax     int64 // 0: max
	}{
		{"zero starts at the last segment (4.x)", 0, false, 3 * seg, 8292, false, 0},
		{"zero starts at the first segment (5.x option)", 0, true, 0, 32 << 10, false, 0},
		{"mid-segment offset is exact", 70000, false, 70000, 32 << 10, false, 0},
		{"offset near a segment end stops at the end", 2*seg - 72, false, 2*seg - 72, 72, false, 0},
		{"segment start", seg, false, seg, 32 << 10, false, 0},
		{"max offset: heartbeats until data", max, false, max, 0, false, 0},
		{"beyond max: out of range, heartbeats only", max + 1000, false, max + 1000, 0, true, 0},
		// RocketMQ 4.x: max - max % segment size, so a log ending exactly at
		// a segment end starts the slave at max (heartbeats until new data),
		// not at the start of the full last segment.
		{"zero on a log ending at a segment end starts at max", 0, false, 3 * seg, 0, false, 3 * seg},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newMemStore(seg)
				st.fill(t, 0, cmp.Or(tc.logMax, max))
				tr := newPipeTransport()
				reg := prometheus.NewPedanticRegistry()
				log, lb := newTestLogger(t)
				m := startMaster(t, st, tr, MasterConfig{StartFromFirstSegment: tc.firstSeg, Registerer: reg, Logger: log})
				defer m.Close()
				c := dial(t, tr)
				defer c.Close()
				start := time.Now()
				rawReport(t, c, tc.request)
				off, body := rawFrame(t, c)
				if off != tc.wantOffset || len(body) != tc.wantSize {
					t.Fatalf("first frame [%d][%d], want [%d][%d]", off, len(body), tc.wantOffset, tc.wantSize)
				}
				if !bytes.Equal(body, pattern(off, len(body))) {
					t.Fatal("frame body differs from the log")
				}
				if tc.wantSize == 0 {
					if d := time.Since(start); d != DefaultHeartbeatInterval {
						t.Fatalf("heartbeat after %v, want %v", d, DefaultHeartbeatInterval)
					}
				} else if time.Since(start) != 0 {
					t.Fatal("data frame was not sent at once")
				}
				synctest.Wait()
				ss := m.Status().Slaves
				if len(ss) != 1 || ss[0].RequestOffset != tc.request || ss[0].OutOfRange != tc.outOfRange {
					t.Fatalf("status %+v, want request %d outOfRange %v", ss, tc.request, tc.outOfRange)
				}
				if got := testutil.ToFloat64(m.met.outOfRange); (got == 1) != tc.outOfRange {
					t.Fatalf("out-of-range metric %v", got)
				}
				if n := lb.count("outside the master's commit log"); (n == 1) != tc.outOfRange || n > 1 {
					t.Fatalf("%d out-of-range log lines", n)
				}
				if tc.outOfRange {
					// The slave keeps reporting its offset: tolerated, never
					// counted as an ack; still heartbeats only, logged once.
					rawReport(t, c, tc.request)
					off, body := rawFrame(t, c)
					if off != tc.request || len(body) != 0 {
						t.Fatalf("frame [%d][%d], want heartbeat at %d", off, len(body), tc.request)
					}
					if n := lb.count("outside the master's commit log"); n != 1 {
						t.Fatalf("%d out-of-range log lines, want 1", n)
					}
				}
			})
		})
	}
}

func TestCoreMasterOutOfRangeBelowMin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const seg = 4096
		st := newMemStore(seg)
		st.fill(t, 2*seg, 3*seg+100) // the log starts at 8192
		tr := newPipeTransport()
		m := startMaster(t, st, tr, MasterConfig{})
		defer m.Close()
		c := dial(t, tr)
		defer c.Close()
		rawReport(t, c, 100)
		if off, body := rawFrame(t, c); off != 100 || len(body) != 0 {
			t.Fatalf("frame [%d][%d], want heartbeat [100][0]", off, len(body))
		}
		synctest.Wait()
		if ss := m.Status().Slaves; len(ss) != 1 || !ss[0].OutOfRange || ss[0].NextTransfer != 100 {
			t.Fatalf("status %+v", ss)
		}
	})
}

// TestCoreMasterStream reads a whole multi-segment log frame by frame and
// checks every rule: batch cap, segment ends, contiguity, content; then the
// heartbeat timing and the immediate wake-up on append.
func TestCoreMasterStream(t *testing.T) {
	for _, batch := range []int{0, 1000, 50 << 10} {
		synctest.Test(t, func(t *testing.T) {
			const seg = 48 << 10 // not a multiple of 32 KiB
			const max = 5*seg + 12345
			st := newMemStore(seg)
			st.fill(t, 0, max)
			tr := newPipeTransport()
			reg := prometheus.NewPedanticRegistry()
			m := startMaster(t, st, tr, MasterConfig{StartFromFirstSegment: true, TransferBatchSize: batch, Registerer: reg})
			defer m.Close()
			c := dial(t, tr)
			defer c.Close()
			limit := batch
			if limit == 0 {
				limit = 32 << 10
			}
			rawReport(t, c, 0)
			var next int64
			frames := 0
			for next < max {
				off, body := rawFrame(t, c)
				if off != next {
					t.Fatalf("frame at %d, want %d", off, next)
				}
				if len(body) == 0 || len(body) > limit {
					t.Fatalf("frame [%d][%d]: size outside (0, %d]", off, len(body), limit)
				}
				if off/seg != (off+int64(len(body))-1)/seg {
					t.Fatalf("frame [%d][%d] crosses a segment end", off, len(body))
				}
				if want := min(int64(limit), seg-off%seg, max-off); int64(len(body)) != want {
					t.Fatalf("frame [%d][%d], want size %d", off, len(body), want)
				}
				if !bytes.Equal(body, pattern(off, len(body))) {
					t.Fatalf("frame [%d][%d] content differs", off, len(body))
				}
				next += int64(len(body))
				frames++
			}
			synctest.Wait()
			if got := testutil.ToFloat64(m.met.sentFrames); got != float64(frames) {
				t.Fatalf("sent frames metric %v, want %d", got, frames)
			}
			if got := testutil.ToFloat64(m.met.sentBytes); got != max {
				t.Fatalf("sent bytes metric %v, want %d", got, max)
			}
			rawReport(t, c, max)
			t0 := time.Now()
			// Heartbeat [next][0] exactly HeartbeatInterval after the last write.
			if off, body := rawFrame(t, c); off != max || len(body) != 0 || time.Since(t0) != DefaultHeartbeatInterval {
				t.Fatalf("frame [%d][%d] after %v, want heartbeat [%d][0] after 5s", off, len(body), time.Since(t0), max)
			}
			// An append 3 s later is shipped at once (no polling delay) ...
			time.Sleep(3 * time.Second)
			st.fill(t, max, max+10)
			t1 := time.Now()
			if off, body := rawFrame(t, c); off != max || len(body) != 10 || time.Since(t1) != 0 {
				t.Fatalf("frame [%d][%d] after %v, want [%d][10] at once", off, len(body), time.Since(t1), max)
			}
			rawReport(t, c, max+10)
			// ... and the next heartbeat comes 5 s after that write.
			if off, body := rawFrame(t, c); off != max+10 || len(body) != 0 || time.Since(t1) != DefaultHeartbeatInterval {
				t.Fatalf("frame [%d][%d] after %v, want heartbeat after 5s", off, len(body), time.Since(t1))
			}
			synctest.Wait()
			if got := testutil.ToFloat64(m.met.heartbeats); got != 2 {
				t.Fatalf("heartbeats metric %v, want 2", got)
			}
		})
	}
}

func TestCoreMasterClosesOnBadReports(t *testing.T) {
	cases := []struct {
		name    string
		reports [][]byte
		log     string
	}{
		{"ack beyond max", [][]byte{be64(1000), be64(5001)}, "ack beyond master max offset"},
		{"negative first report", [][]byte{be64(-1)}, "negative offset"},
		{"negative ack", [][]byte{be64(1000), be64(-5)}, "negative offset"},
		{"negative value superseded in the same read", [][]byte{append(be64(-5), be64(100)...)}, "negative offset"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newMemStore(1 << 20)
				st.fill(t, 0, 5000)
				tr := newPipeTransport()
				log, lb := newTestLogger(t)
				reg := prometheus.NewPedanticRegistry()
				m := startMaster(t, st, tr, MasterConfig{Logger: log, Registerer: reg})
				defer m.Close()
				c := dial(t, tr)
				defer c.Close()
				go io.Copy(io.Discard, c)
				start := time.Now()
				for _, r := range tc.reports {
					if _, err := c.Write(r); err != nil {
						t.Fatal(err)
					}
					synctest.Wait() // one read per write, as the case lists them
				}
				synctest.Wait()
				if time.Since(start) != 0 {
					t.Fatal("time passed")
				}
				if s := m.Status().Slaves; len(s) != 0 {
					t.Fatalf("connection still open: %+v", s)
				}
				if n := lb.count(tc.log); n != 1 {
					t.Fatalf("%d log lines with %q, want 1", n, tc.log)
				}
				if n := testutil.CollectAndCount(m.met.ackOffset); n != 0 {
					t.Fatalf("%d ack-offset series left after disconnect", n)
				}
			})
		})
	}
}

func be64(v int64) []byte {
	var b [8]byte
	for i := range 8 {
		b[i] = byte(uint64(v) >> (56 - 8*i))
	}
	return b[:]
}

// TestCoreMasterReportsSplit sends three reports split in two writes at
// every byte position: per read the last complete value is the ack; the
// first value processed is the request offset.
func TestCoreMasterReportsSplit(t *testing.T) {
	stream := append(append(be64(1000), be64(2000)...), be64(3000)...)
	for k := 0; k <= len(stream); k++ {
		synctest.Test(t, func(t *testing.T) {
			st := newMemStore(1 << 20)
			st.fill(t, 0, 5000)
			tr := newPipeTransport()
			m := startMaster(t, st, tr, MasterConfig{})
			defer m.Close()
			c := dial(t, tr)
			defer c.Close()
			go io.Copy(io.Discard, c)
			for _, part := range [][]byte{stream[:k], stream[k:]} {
				if len(part) == 0 {
					continue
				}
				if _, err := c.Write(part); err != nil {
					t.Fatal(err)
				}
				synctest.Wait() // the master reads each part on its own
			}
			wantReq := int64(3000)
			switch {
			case k == len(stream):
				wantReq = 3000
			case k >= 16:
				wantReq = 2000
			case k >= 8:
				wantReq = 1000
			}
			ss := m.Status().Slaves
			if len(ss) != 1 || ss[0].RequestOffset != wantReq || ss[0].AckOffset != 3000 {
				t.Fatalf("split at %d: status %+v, want request %d ack 3000", k, ss, wantReq)
			}
		})
	}
}

func TestCoreMasterCloseTearsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1 << 20)
		st.fill(t, 0, 100<<10)
		tr := newPipeTransport()
		reg := prometheus.NewPedanticRegistry()
		m := startMaster(t, st, tr, MasterConfig{Registerer: reg})
		var conns []net.Conn
		for range 3 {
			c := dial(t, tr)
			defer c.Close()
			rawReport(t, c, 0)
			conns = append(conns, c)
		}
		synctest.Wait() // writers are blocked mid-frame: nobody reads
		if err := m.WaitSlaves(context.Background(), 3); err != nil {
			t.Fatal(err)
		}
		if got := testutil.ToFloat64(m.met.conns); got != 3 {
			t.Fatalf("connections gauge %v", got)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(); err != nil { // idempotent
			t.Fatal(err)
		}
		for _, c := range conns {
			expectClosed(t, c)
		}
		if got := testutil.ToFloat64(m.met.conns); got != 0 {
			t.Fatalf("connections gauge %v after close", got)
		}
		if got := testutil.ToFloat64(m.met.connsTotal); got != 3 {
			t.Fatalf("connections_total %v", got)
		}
		if _, err := tr.Dial(context.Background(), testMasterAddr); err == nil {
			t.Fatal("listener still open after Close")
		}
		if err := m.Start(); !errors.Is(err, ErrClosed) {
			t.Fatalf("Start after Close: %v", err)
		}
		if _, err := m.Put(context.Background(), testMsg(10)); !errors.Is(err, ErrClosed) {
			t.Fatalf("Put after Close: %v", err)
		}
	})
}
