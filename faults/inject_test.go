package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/node"
	"github.com/replicatorhq/replicator/internal/pluginhost"
	"github.com/replicatorhq/replicator/internal/proctest"
	"github.com/replicatorhq/replicator/plugins/commitlog"
	"github.com/replicatorhq/replicator/plugins/commitlog/vfs"
	"github.com/replicatorhq/replicator/plugins/commitlog/vfs/errorfs"
	"github.com/replicatorhq/replicator/sdk/store"
)

// logBuffer is a goroutine-safe log sink.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// inProcMaster runs a master node in this process whose commit log's
// file system injects errors (errorfs; no injector until a test sets one).
type inProcMaster struct {
	dir    string
	fs     *errorfs.FS
	logs   *logBuffer
	api    string
	cancel context.CancelFunc
	done   chan error
}

func startInProcMaster(t *testing.T, flush commitlog.FlushMode) *inProcMaster {
	t.Helper()
	m := &inProcMaster{dir: filepath.Join(t.TempDir(), "m"), fs: errorfs.Wrap(vfs.Default, nil), logs: &logBuffer{}, done: make(chan error, 1)}
	reg := pluginhost.Builtin()
	reg.RegisterStore("commitlog", func(dir string, so pluginhost.StoreOptions) (store.Store, error) {
		o := commitlog.DefaultOptions()
		o.SegmentSize, o.MaxMessageSize, o.FlushMode = segSize, 32<<10, flush
		o.Logger, o.Registerer, o.FS = so.Logger, so.Registerer, m.fs
		return commitlog.Open(dir, o)
	})
	// Port 0: the node binds its own ports (a port picked free beforehand
	// can be taken by a parallel test before the node binds it).
	n, err := node.New(node.Config{
		Role: core.AsyncMaster, DataDir: m.dir, Listen: "127.0.0.1:0", HAListen: "127.0.0.1:0",
		SegmentSize: segSize, SyncFlush: flush == commitlog.FlushSync, MaxMessageSize: 32 << 10,
		Registry: reg, Logger: hclog.New(&hclog.LoggerOptions{Name: "replicator", Output: m.logs, Level: hclog.Info}),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() { m.done <- n.Run(ctx) }()
	t.Cleanup(func() { m.stop() })
	select {
	case <-n.Ready():
	case err := <-m.done:
		m.done <- err
		t.Fatalf("in-process master: %v", err)
	case <-time.After(proctest.WaitTimeout):
		t.Fatal("in-process master not ready")
	}
	m.api = n.URL()
	return m
}

// stop shuts the node down and returns Run's result (idempotent).
func (m *inProcMaster) stop() error {
	m.cancel()
	err := <-m.done
	m.done <- err
	return err
}

// metric reads one sample of the node's /metrics.
func (m *inProcMaster) metric(t *testing.T, series string) float64 {
	t.Helper()
	c := proctest.NewClient(m.api, 10*time.Second)
	defer c.Close()
	v, ok, err := c.Metric(context.Background(), series)
	if err != nil || !ok {
		t.Fatalf("metric %s: found %v, %v", series, ok, err)
	}
	return v
}

// reopen opens the master's commit log after the node stopped, without
// faults, and returns every record's (offset, body).
func reopen(t *testing.T, dir string) map[int64][]byte {
	t.Helper()
	o := commitlog.DefaultOptions()
	o.SegmentSize, o.MaxMessageSize = segSize, 32<<10
	l, err := commitlog.Open(dir, o)
	if err != nil {
		t.Fatalf("reopening the log written under faults: %v (corrupt: %v)", err, commitlog.IsCorrupt(err))
	}
	defer l.Close()
	out := map[int64][]byte{}
	b := l.Bounds()
	for off := b.Min; off < b.Max; {
		recs, next, err := l.ReadMessages(off, 256)
		if err != nil {
			t.Fatalf("reading the reopened log at %d: %v", off, err)
		}
		for _, r := range recs {
			out[r.PhysicalOffset] = r.Body
		}
		if next == off {
			break
		}
		off = next
	}
	return out
}

// TestInjectedFsyncFailure: a SYNC_FLUSH master whose msync fails (EIO,
// injected in the commit log's flush). Puts are refused with 500 naming
// the error, never PUT_OK, from the first failure on (also after the
// fault clears: the log no longer knows what is durable, so it never
// claims it again until a restart); the failure is logged, counted in the
// HTTP metrics and visible as a flushed offset that stops below the max
// offset. After a restart without the fault the log opens without
// corruption and holds every PUT_OK message.
func TestInjectedFsyncFailure(t *testing.T) {
	t.Parallel()
	for _, seed := range seeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			m := startInProcMaster(t, commitlog.FlushSync)
			type okPut struct {
				off  int64
				body []byte
			}
			var oks []okPut
			i := 0
			put := func() (string, error) {
				topic, body := message(seed, 0, i)
				i++
				a, err := putOne(t, m.api, topic, body)
				if err == nil && a.Status == "PUT_OK" {
					oks = append(oks, okPut{a.Offset, body})
				}
				return a.Status, err
			}
			for range 50 {
				if st, err := put(); err != nil || st != "PUT_OK" {
					t.Fatalf("before the fault: %s %v", st, err)
				}
			}
			m.fs.SetInjector(errorfs.Always(syscall.EIO, errorfs.Kinds(errorfs.OpSync)))
			failed := 0
			for range 10 {
				st, err := put()
				var se *proctest.StatusError
				if !errors.As(err, &se) || se.Code != 500 || !strings.Contains(se.Body, "input/output error") {
					t.Fatalf("put while fsync fails: %s %v, want 500 naming EIO", st, err)
				}
				failed++
			}
			if v := m.metric(t, `replicator_http_requests_total{code="500",route="put"}`); int(v) != failed {
				t.Fatalf("500 answers counted %v, want %d", v, failed)
			}
			if fl, mx := m.metric(t, "replicator_commitlog_flushed_offset_bytes"), m.metric(t, "replicator_commitlog_max_offset_bytes"); fl >= mx {
				t.Fatalf("flushed offset %v not below max offset %v while flushes fail", fl, mx)
			}
			// Once the disk works again the store keeps refusing: its first
			// flush error sticks until a restart. (A put whose record a
			// later, successful background flush already covered before
			// it looked may still be PUT_OK: that record is durable.)
			m.fs.SetInjector(nil)
			after := map[string]int{}
			for range 3 {
				st, err := put()
				switch {
				case isStatus(err, 500):
					after["500"]++
					failed++
				case err == nil && st == "PUT_OK":
					after[st]++
				default:
					t.Fatalf("put after the fault cleared: %s %v", st, err)
				}
			}
			logs := m.logs.String()
			for _, w := range []string{"[ERROR] replicator.commitlog: flush", "input/output error", "put failed"} {
				if !strings.Contains(logs, w) {
					t.Fatalf("the logs lack %q:\n%s", w, logs)
				}
			}
			if m.fs.Injected() == 0 {
				t.Fatal("no fault was injected")
			}
			m.stop()
			got := reopen(t, m.dir)
			for _, p := range oks {
				if !bytes.Equal(got[p.off], p.body) {
					t.Fatalf("PUT_OK message at %d is not in the reopened log", p.off)
				}
			}
			result(t, "put_ok=%d put_500=%d after_clear=%v injected=%d reopened_records=%d put_ok_verified=%d losses=0", len(oks), failed, after, m.fs.Injected(), len(got), len(oks))
		})
	}
}

// laterSegment selects a segment file other than the first (in
// DATA/commitlog or, while it is built, DATA/commitlog.alloc, with the
// preallocator's ".spare" suffix): not the checkpoint or abort files.
var laterSegment = errorfs.PathFunc(func(path string) bool {
	dir := filepath.Base(filepath.Dir(path))
	name, _ := strings.CutSuffix(filepath.Base(path), ".spare")
	_, ok := store.ParseSegmentName(name)
	return ok && name != store.SegmentName(0) && (dir == "commitlog" || dir == "commitlog.alloc")
})

// TestInjectedSegmentCreateFailure: segment creation fails with ENOSPC
// (injected on the append path and in the preallocator). Puts that need
// the new segment are refused with 507 (disk full), never PUT_OK, and are not
// stored; the log stays readable; once creation works again puts are
// PUT_OK without a restart, and a reopened log holds every PUT_OK message.
func TestInjectedSegmentCreateFailure(t *testing.T) {
	t.Parallel()
	for _, seed := range seeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			m := startInProcMaster(t, commitlog.FlushAsync)
			m.fs.SetInjector(errorfs.Always(syscall.ENOSPC, errorfs.And(errorfs.Kinds(errorfs.OpCreate), laterSegment)))
			type okPut struct {
				off  int64
				body []byte
			}
			var oks []okPut
			failed := 0
			for i := 0; failed < 5; i++ {
				if i > 1000 {
					t.Fatal("no put failed: segment creation was not refused")
				}
				topic, body := message(seed, 1, i)
				a, err := putOne(t, m.api, topic, body)
				switch {
				case err == nil && a.Status == "PUT_OK":
					if a.NextOffset > segSize {
						t.Fatalf("PUT_OK at %d-%d although no second segment can be created", a.Offset, a.NextOffset)
					}
					oks = append(oks, okPut{a.Offset, body})
				case isStatus(err, 507) && strings.Contains(err.Error(), "no space left on device"):
					failed++
				default:
					t.Fatalf("put %d: %+v %v", i, a, err)
				}
			}
			st := status(t, m.api)
			if st.MaxOffset != segSize {
				t.Fatalf("after refused rolls the max offset is %d, want the first segment's end %d", st.MaxOffset, segSize)
			}
			if !strings.Contains(m.logs.String(), "put failed") {
				t.Fatalf("no put failure logged:\n%s", m.logs.String())
			}
			m.fs.SetInjector(nil)
			for i := range 5 {
				topic, body := message(seed, 2, i)
				a, err := putOne(t, m.api, topic, body)
				if err != nil || a.Status != "PUT_OK" {
					t.Fatalf("put after creation works again: %+v %v", a, err)
				}
				oks = append(oks, okPut{a.Offset, body})
			}
			if err := m.stop(); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			got := reopen(t, m.dir)
			for _, p := range oks {
				if !bytes.Equal(got[p.off], p.body) {
					t.Fatalf("PUT_OK message at %d is not in the reopened log", p.off)
				}
			}
			if len(got) != len(oks) {
				t.Fatalf("the reopened log holds %d records, %d were PUT_OK and the rest refused", len(got), len(oks))
			}
			result(t, "put_ok=%d put_507=%d injected=%d reopened_records=%d losses=0", len(oks), failed, m.fs.Injected(), len(got))
		})
	}
}

// TestInjectedFsyncFailureAsyncFlush: with ASYNC_FLUSH a put is answered
// once its record is in the page cache (RocketMQ's contract), so a failing
// msync does not turn puts into errors: it is logged at every periodic
// flush and shows as a flushed offset that stops moving. Once msync works
// again the flushed offset catches up, and a reopened log holds every
// PUT_OK message.
func TestInjectedFsyncFailureAsyncFlush(t *testing.T) {
	t.Parallel()
	seed := seeds(t)[0]
	m := startInProcMaster(t, commitlog.FlushAsync)
	offs := map[int64][]byte{}
	put := func(i int) {
		t.Helper()
		topic, body := message(seed, 3, i)
		a, err := putOne(t, m.api, topic, body)
		if err != nil || a.Status != "PUT_OK" {
			t.Fatalf("async-flush put %d: %+v %v", i, a, err)
		}
		offs[a.Offset] = body
	}
	for i := range 20 {
		put(i)
	}
	proctest.Eventually(t, "first flush", proctest.WaitTimeout, func() error {
		if fl, mx := m.metric(t, "replicator_commitlog_flushed_offset_bytes"), m.metric(t, "replicator_commitlog_max_offset_bytes"); fl != mx {
			return fmt.Errorf("flushed %v of %v", fl, mx)
		}
		return nil
	})
	stuck := m.metric(t, "replicator_commitlog_flushed_offset_bytes")
	m.fs.SetInjector(errorfs.Always(syscall.EIO, errorfs.Kinds(errorfs.OpSync)))
	for i := 20; i < 40; i++ {
		put(i)
	}
	proctest.Eventually(t, "the failed periodic flush logged", proctest.WaitTimeout, func() error {
		if !strings.Contains(m.logs.String(), "periodic flush") {
			return fmt.Errorf("not logged yet")
		}
		return nil
	})
	if fl := m.metric(t, "replicator_commitlog_flushed_offset_bytes"); fl != stuck {
		t.Fatalf("flushed offset moved from %v to %v while msync fails", stuck, fl)
	}
	m.fs.SetInjector(nil)
	proctest.Eventually(t, "flushes resume", proctest.WaitTimeout, func() error {
		if fl, mx := m.metric(t, "replicator_commitlog_flushed_offset_bytes"), m.metric(t, "replicator_commitlog_max_offset_bytes"); fl != mx {
			return fmt.Errorf("flushed %v of %v", fl, mx)
		}
		return nil
	})
	if err := m.stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	got := reopen(t, m.dir)
	for off, body := range offs {
		if !bytes.Equal(got[off], body) {
			t.Fatalf("PUT_OK message at %d is not in the reopened log", off)
		}
	}
	result(t, "put_ok=%d (20 while msync failed) injected=%d reopened_records=%d losses=0", len(offs), m.fs.Injected(), len(got))
}
