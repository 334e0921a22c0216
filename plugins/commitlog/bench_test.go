package commitlog

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/replicatorhq/replicator/sdk/record"
)

// benchOptions: production defaults (1 GiB segments, preallocation and
// prefault), quiet.
func benchOptions(b *testing.B) Options {
	o := DefaultOptions()
	o.Logger = nil
	return o
}

func benchAppend(b *testing.B, o Options, goroutines int) {
	l, err := Open(b.TempDir(), o)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	msg := &record.Message{Topic: "BenchTopic", Body: make([]byte, 1024), Properties: map[string]string{"KEYS": "k"}}
	size, _ := record.Size(msg)
	// Steady state: the active segment populated, the next one ready.
	if _, err := l.Append(context.Background(), msg); err != nil {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		l.mu.Lock()
		ready := l.spare != nil
		l.mu.Unlock()
		if ready && len(l.warmReq) == 0 {
			break
		}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	flushes0 := testutil.ToFloat64(l.m.flushes)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	per := b.N / goroutines
	for g := 0; g < goroutines; g++ {
		n := per
		if g == 0 {
			n += b.N % goroutines
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := *msg
			for i := 0; i < n; i++ {
				m.QueueID = int32(g)
				if _, err := l.Append(context.Background(), &m); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el, "msgs/s")
	if o.FlushMode == FlushSync {
		b.ReportMetric((testutil.ToFloat64(l.m.flushes)-flushes0)/el, "fsyncs/s")
	}
}

// BenchmarkAppend: 1 KiB messages, async and sync flush, 1 and 16
// appenders. Sync reports group commits as fsyncs/s.
func BenchmarkAppend(b *testing.B) {
	for _, mode := range []FlushMode{FlushAsync, FlushSync} {
		for _, g := range []int{1, 16} {
			b.Run(fmt.Sprintf("%v/goroutines=%d", mode, g), func(b *testing.B) {
				o := benchOptions(b)
				o.FlushMode = mode
				benchAppend(b, o, g)
			})
		}
	}
}

// BenchmarkRead: 32 KiB zero-copy views (what one HA frame ships).
func BenchmarkRead(b *testing.B) {
	o := benchOptions(b)
	o.SegmentSize = 64 << 20
	l, err := Open(b.TempDir(), o)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	msg := &record.Message{Topic: "BenchTopic", Body: make([]byte, 1024)}
	for l.Bounds().Max < 32<<20 {
		if _, err := l.Append(context.Background(), msg); err != nil {
			b.Fatal(err)
		}
	}
	mx := l.Bounds().Max
	b.SetBytes(32 << 10)
	b.ReportAllocs()
	b.ResetTimer()
	var off int64
	for i := 0; i < b.N; i++ {
		v, err := l.Read(off, 32<<10)
		if err != nil {
			b.Fatal(err)
		}
		off += int64(len(v.Data))
		if off >= mx {
			off = 0
		}
		v.Release()
	}
}

func procStatus(b *testing.B, field string) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status")
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	b.Skip("no " + field)
	return 0
}

// BenchmarkRSS writes 64 segments of 16 MiB (1 GiB of log) and reports
// the growth of the file-backed resident set (RssFile in
// /proc/self/status) after the flusher's trim: it stays near the active
// plus the preallocated segment, not the log size. trim=false shows the
// same run without MADV_DONTNEED of sealed segments.
func BenchmarkRSS(b *testing.B) {
	for _, trim := range []bool{true, false} {
		b.Run(fmt.Sprintf("trim=%v", trim), func(b *testing.B) { benchRSS(b, trim) })
	}
}

func benchRSS(b *testing.B, trim bool) {
	for i := 0; i < b.N; i++ {
		o := benchOptions(b)
		o.SegmentSize = 16 << 20
		checkpoint := (*Log).checkpointNow // what the flusher does every 500 ms
		if !trim {
			// No background flush or housekeeping (both trim), and the
			// checkpoint below without the trim.
			o.FlushInterval, o.RetentionInterval = time.Hour, time.Hour
			checkpoint = (*Log).flushAndCheckpoint
		}
		l, err := Open(b.TempDir(), o)
		if err != nil {
			b.Fatal(err)
		}
		msg := &record.Message{Topic: "BenchTopic", Body: make([]byte, 1024)}
		before := procStatus(b, "RssFile")
		peak := 0.0
		for l.Bounds().Max < 64*o.SegmentSize {
			if _, err := l.Append(context.Background(), msg); err != nil {
				b.Fatal(err)
			}
			if l.Bounds().Max%(8<<20) < 1200 {
				if err := checkpoint(l, false); err != nil {
					b.Fatal(err)
				}
				peak = max(peak, procStatus(b, "RssFile")-before)
			}
		}
		if err := checkpoint(l, false); err != nil {
			b.Fatal(err)
		}
		after := procStatus(b, "RssFile") - before
		b.ReportMetric(float64(l.Bounds().Max)/(1<<20), "log-MiB")
		b.ReportMetric(peak, "peak-rss-file-MiB")
		b.ReportMetric(after, "end-rss-file-MiB")
		l.Close()
	}
}

// BenchmarkRoll: every append fills a 64 KiB segment, so each op is a
// roll to a new segment: with the background allocator (the spare is
// renamed from commitlog.alloc into commitlog/) and without (the roll
// creates, sizes, maps and renames the file itself). Bound the disk
// with -benchtime (2000x is 128 MiB).
func BenchmarkRoll(b *testing.B) {
	for _, prealloc := range []bool{true, false} {
		b.Run(fmt.Sprintf("prealloc=%v", prealloc), func(b *testing.B) {
			o := benchOptions(b)
			o.SegmentSize = 64 << 10
			o.Preallocate = prealloc
			o.Prefault = false
			l, err := Open(b.TempDir(), o)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			msg := &record.Message{Topic: "BenchTopic", Body: make([]byte, 60<<10)}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := l.Append(context.Background(), msg); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(len(l.segList()))/float64(b.N), "segments/op")
		})
	}
}

// BenchmarkReplicaAppendFrom: a replica receiving a catch-up, the store's
// half of it: 64 MiB of 4000-byte records in 32 KiB frames through
// AppendAtFrom (the slave's path on plain TCP) into fresh segments, until
// the records are dispatched (the queue table current, as a promotion
// needs it). Reports MB/s and
// the process's CPU per KB (the receive path, the dispatch wherever it
// runs, the flusher), which a shared machine moves less than the rate.
func BenchmarkReplicaAppendFrom(b *testing.B) {
	const total, frame = 64 << 20, 32 << 10
	o := benchOptions(b)
	o.SegmentSize = 2 * total // one segment: the source needs no filler
	src := make([]byte, 0, total)
	var qo [4]int64
	for i := 0; len(src)+4200 < total; i++ {
		qid := int32(i % 4)
		m := &record.Message{Topic: "BenchTopic", QueueID: qid, Body: make([]byte, 4000)}
		var err error
		if src, err = record.Encode(src, m, qo[qid], int64(len(src)), 1); err != nil {
			b.Fatal(err)
		}
		qo[qid]++
	}
	b.SetBytes(int64(len(src)))
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		l, err := Open(b.TempDir(), o)
		if err != nil {
			b.Fatal(err)
		}
		c0 := processCPU()
		b.StartTimer()
		for at := 0; at < len(src); at += frame {
			n := min(frame, len(src)-at)
			if _, err := l.AppendAtFrom(int64(at), n, bytes.NewReader(src[at:at+n])); err != nil {
				b.Fatal(err)
			}
		}
		// The dispatcher leaves less than dispatchBatch to whoever needs
		// the table next (Append, Truncate, Close): drain it as they do.
		for {
			if d, _ := dispatchState(l); int64(len(src))-d < dispatchBatch {
				break
			}
			runtime.Gosched()
		}
		l.mu.Lock()
		l.dispatch()
		d := l.dispatched
		l.mu.Unlock()
		if d != int64(len(src)) {
			b.Fatalf("dispatched %d of %d", d, len(src))
		}
		b.StopTimer()
		cpu += processCPU() - c0
		l.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(len(src)/1000), "cpu-ns/KB")
}
