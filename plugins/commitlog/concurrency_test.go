package commitlog

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/replicatorhq/replicator/plugins/commitlog/vfs/errorfs"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// TestCommitLogConcurrentAppenders: appenders, readers and a watcher at
// once (run with -race); every record lands once, queue offsets are dense
// per queue and in log order.
func TestCommitLogConcurrentAppenders(t *testing.T) {
	for _, mode := range []FlushMode{FlushAsync, FlushSync} {
		t.Run(mode.String(), func(t *testing.T) {
			o := testOptions(t, 16384)
			o.FlushMode = mode
			l := mustOpen(t, t.TempDir(), o)
			defer mustClose(t, l)
			const writers, each = 8, 150
			ctx, stop := context.WithCancel(context.Background())
			var readers sync.WaitGroup
			ch := make(chan struct{}, 1)
			defer l.Watch(ch)()
			for r := 0; r < 2; r++ {
				readers.Add(1)
				go func() {
					defer readers.Done()
					for ctx.Err() == nil {
						select {
						case <-ch:
						case <-ctx.Done():
							return
						}
						b := l.Bounds()
						for off := b.Min; off < b.Max; {
							v, err := l.Read(off, 32<<10)
							if err != nil {
								t.Error(err)
								return
							}
							off += int64(len(v.Data))
							v.Release()
						}
					}
				}()
			}
			var wg sync.WaitGroup
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < each; i++ {
						if _, err := l.Append(context.Background(), testMsg("T", int32(w%3), 200+w*10, int64(w*1000+i))); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			stop()
			readers.Wait()
			recs := readAll(t, l)
			if len(recs) != writers*each {
				t.Fatalf("%d records, want %d", len(recs), writers*each)
			}
			next := map[int32]int64{}
			for _, r := range recs {
				if r.QueueOffset != next[r.QueueID] {
					t.Fatalf("queue %d: offset %d, want %d", r.QueueID, r.QueueOffset, next[r.QueueID])
				}
				next[r.QueueID]++
			}
			if mode == FlushSync {
				if b := l.Bounds(); b.Flushed != b.Max {
					t.Fatalf("sync mode: flushed %d < max %d", b.Flushed, b.Max)
				}
			}
		})
	}
}

// TestCommitLogGroupCommit: while a flush is stuck, concurrent sync
// appends queue up; one group commit then releases them all.
func TestCommitLogGroupCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o, fsys := faultyOptions(t, 65536)
		o.FlushMode = FlushSync
		o.Preallocate = false
		l := mustOpen(t, t.TempDir(), o)
		gate := make(chan struct{})
		var first atomic.Bool
		msync := errorfs.And(errorfs.Kinds(errorfs.OpSync), segmentFile)
		fsys.SetInjector(errorfs.InjectorFunc(func(op errorfs.Op) error {
			if msync(op) && first.CompareAndSwap(false, true) {
				<-gate // the first flush's msync is stuck
			}
			return nil
		}))
		var wg sync.WaitGroup
		errs := make(chan error, 17)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := l.Append(context.Background(), testMsg("T", 0, 100, 0))
			errs <- err
		}()
		synctest.Wait() // the first flush is stuck in its msync
		for i := 1; i <= 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := l.Append(context.Background(), testMsg("T", 0, 100, int64(i)))
				errs <- err
			}()
		}
		synctest.Wait()
		before := testutil.ToFloat64(l.m.flushes)
		close(gate)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := testutil.ToFloat64(l.m.flushes) - before; n > 2 {
			t.Fatalf("%v flushes for 17 appends, want at most 2 (one group)", n)
		}
		mustClose(t, l)
	})
}

// TestCommitLogFlushTimeout: a flush slower than SyncFlushTimeout makes
// Append return its result with ErrFlushDiskTimeout (fake time).
func TestCommitLogFlushTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o, fsys := faultyOptions(t, 65536)
		o.FlushMode = FlushSync
		o.Preallocate = false
		l := mustOpen(t, t.TempDir(), o)
		gate := make(chan struct{})
		msync := errorfs.And(errorfs.Kinds(errorfs.OpSync), segmentFile)
		fsys.SetInjector(errorfs.InjectorFunc(func(op errorfs.Op) error {
			if msync(op) {
				<-gate // every flush is stuck in its msync until the gate opens
			}
			return nil
		}))
		start := time.Now()
		res, err := l.Append(context.Background(), testMsg("T", 0, 100, 1))
		if !errors.Is(err, store.ErrFlushDiskTimeout) || res.NextOffset == 0 {
			t.Fatalf("Append = %+v, %v", res, err)
		}
		if d := time.Since(start); d != DefaultSyncFlushTimeout {
			t.Fatalf("timed out after %v", d)
		}
		if got := testutil.ToFloat64(l.m.flushTimeouts); got != 1 {
			t.Fatalf("flush_timeouts_total %v", got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := l.Append(ctx, testMsg("T", 0, 100, 2)); !errors.Is(err, store.ErrFlushDiskTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Append with a deadline: %v", err)
		}
		close(gate)
		mustClose(t, l)
		if recs := readAllClosedSafe(t, l); recs != 0 {
			t.Fatal("unexpected")
		}
	})
}

func readAllClosedSafe(t *testing.T, l *Log) int {
	if _, err := l.Read(0, 1); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	return 0
}

// TestCommitLogRetention: age and size limits delete whole segments from
// the front, never the active one and never one a View pins.
func TestCommitLogRetention(t *testing.T) {
	const seg = 4096
	var clock atomic.Int64 // background goroutines read the clock too
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	advance := func(d time.Duration) { clock.Add(int64(d)) }
	o := testOptions(t, seg)
	o.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	o.RetentionAge = time.Hour
	// The prefaulter pins segments while it populates them, and retention
	// stops at a pinned segment (and retries later); a slow machine could
	// still be populating segment 0 here. This test is about retention.
	o.Prefault = false
	dir := t.TempDir()
	l := mustOpen(t, dir, o)
	for l.Bounds().LastSegmentStart < 3*seg {
		mustAppend(t, l, testMsg("T", 0, 500, 1))
		advance(time.Minute)
	}
	// Segment 0 was last written ~20 minutes in: nothing is an hour old yet.
	if n, err := l.enforceRetention(); n != 0 || err != nil {
		t.Fatalf("deleted %d, %v", n, err)
	}
	advance(2 * time.Hour)
	v, err := l.Read(seg+10, 10) // pins segment 1
	if err != nil {
		t.Fatal(err)
	}
	if n, err := l.enforceRetention(); n != 1 || err != nil || l.Bounds().Min != seg {
		t.Fatalf("with a view on segment 1: deleted %d (%v), min %d", n, err, l.Bounds().Min)
	}
	v.Release()
	if n, _ := l.enforceRetention(); n != 2 {
		t.Fatalf("deleted %d, want 2 (never the active segment)", n)
	}
	b := l.Bounds()
	if b.Min != b.LastSegmentStart {
		t.Fatalf("bounds %+v", b)
	}
	if _, err := l.Read(0, 10); !errors.Is(err, store.ErrOffsetOutOfRange) {
		t.Fatalf("Read below min: %v", err)
	}
	mustClose(t, l)
	l = mustOpen(t, dir, o)
	if got := l.Bounds(); got.Min != b.Min || got.Max != b.Max {
		t.Fatalf("reopened: %+v, want %+v", got, b)
	}
	mustClose(t, l)

	// Size: keep at most 2 segments of files.
	o.RetentionAge = 0
	o.RetentionBytes = 2 * seg
	l = mustOpen(t, t.TempDir(), o)
	defer mustClose(t, l)
	for l.Bounds().LastSegmentStart < 4*seg {
		mustAppend(t, l, testMsg("T", 0, 500, 1))
	}
	if n, _ := l.enforceRetention(); n != 3 || len(l.segList()) != 2 {
		t.Fatalf("deleted %d, %d segments left", n, len(l.segList()))
	}
	_ = record.FillerSize
}
