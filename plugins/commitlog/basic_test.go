package commitlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

func TestCommitLogRoundTripFiller(t *testing.T) {
	for _, mode := range []FlushMode{FlushAsync, FlushSync} {
		t.Run(mode.String(), func(t *testing.T) {
			const seg = 4096
			dir := t.TempDir()
			o := testOptions(t, seg)
			o.FlushMode = mode
			reg := prometheus.NewRegistry()
			o.Registerer = reg
			l := mustOpen(t, dir, o)
			type want struct {
				off, qo int64
				m       *record.Message
			}
			var wants []want
			qos := map[int32]int64{}
			for i := 0; l.Bounds().LastSegmentStart < 5*seg; i++ {
				m := testMsg("TopicA", int32(i%3), 50+(i*397)%1500, int64(i))
				res, err := l.Append(context.Background(), m)
				if err != nil {
					t.Fatal(err)
				}
				if res.QueueOffset != qos[m.QueueID] {
					t.Fatalf("queue offset %d, want %d", res.QueueOffset, qos[m.QueueID])
				}
				qos[m.QueueID]++
				if res.Offset/seg != (res.NextOffset-1)/seg {
					t.Fatalf("record [%d,%d) spans segments", res.Offset, res.NextOffset)
				}
				if mode == FlushSync && l.Bounds().Flushed < res.NextOffset {
					t.Fatalf("sync append returned before its flush")
				}
				wants = append(wants, want{res.Offset, res.QueueOffset, m})
			}
			check := func(l *Log) {
				recs := readAll(t, l)
				if len(recs) != len(wants) {
					t.Fatalf("%d records, want %d", len(recs), len(wants))
				}
				for i, r := range recs {
					w := wants[i]
					if r.PhysicalOffset != w.off || r.QueueOffset != w.qo || !bytes.Equal(r.Body, w.m.Body) || r.Topic != w.m.Topic || r.Properties["KEYS"] != w.m.Properties["KEYS"] {
						t.Fatalf("record %d: %+v", i, r)
					}
				}
				// Every sealed segment ends with a filler declaring its rest.
				for i := 1; i < len(wants); i++ {
					prev, cur := wants[i-1], wants[i]
					end := prev.off + int64(len(mustEncode(t, prev.m)))
					if cur.off/seg == prev.off/seg {
						continue
					}
					v, err := l.Read(end, seg)
					if err != nil {
						t.Fatal(err)
					}
					if n, ok := record.IsFiller(v.Data); !ok || int64(n) != seg-end%seg || int64(len(v.Data)) != int64(n) {
						t.Fatalf("no filler at %d: %x", end, v.Data[:8])
					}
					v.Release()
				}
			}
			check(l)
			if got := testutil.ToFloat64(l.m.appended); got != float64(len(wants)) {
				t.Fatalf("appended_records_total %v", got)
			}
			if got := testutil.ToFloat64(l.m.segments); got < 6 {
				t.Fatalf("segments gauge %v", got)
			}
			mustClose(t, l)
			if _, err := l.Append(context.Background(), wants[0].m); !errors.Is(err, store.ErrClosed) {
				t.Fatalf("Append after Close: %v", err)
			}
			if _, err := l.Read(0, 10); !errors.Is(err, store.ErrClosed) {
				t.Fatalf("Read after Close: %v", err)
			}
			if err := l.Close(); !errors.Is(err, store.ErrClosed) {
				t.Fatalf("second Close: %v", err)
			}
			l = mustOpen(t, dir, o)
			check(l)
			// Queue offsets continue after reopening.
			res, err := l.Append(context.Background(), testMsg("TopicA", 1, 10, 99))
			if err != nil || res.QueueOffset != qos[1] {
				t.Fatalf("after reopen: queue offset %d, want %d (%v)", res.QueueOffset, qos[1], err)
			}
			mustClose(t, l)
			// Without the checkpoint the queue table is rebuilt from the segments.
			if err := os.Remove(filepath.Join(dir, checkpointName)); err != nil {
				t.Fatal(err)
			}
			l = mustOpen(t, dir, o)
			res, err = l.Append(context.Background(), testMsg("TopicA", 1, 10, 100))
			if err != nil || res.QueueOffset != qos[1]+1 {
				t.Fatalf("without checkpoint: queue offset %d, want %d (%v)", res.QueueOffset, qos[1]+1, err)
			}
			mustClose(t, l)
		})
	}
}

func mustEncode(t testing.TB, m *record.Message) []byte {
	b, err := record.Encode(nil, m, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCommitLogBadInput(t *testing.T) {
	l := mustOpen(t, t.TempDir(), testOptions(t, 8192))
	defer mustClose(t, l)
	mustAppend(t, l, testMsg("T", 0, 10, 1))
	before := l.Bounds().Max
	cases := []struct {
		name string
		m    *record.Message
		want error
	}{
		{"empty topic", &record.Message{}, store.ErrInvalidTopic},
		{"bad topic", &record.Message{Topic: "a/b"}, store.ErrInvalidTopic},
		{"larger than a segment", &record.Message{Topic: "T", Body: make([]byte, 8192)}, store.ErrMessageTooLarge},
		{"properties too large", &record.Message{Topic: "T", Properties: map[string]string{"k": strings.Repeat("v", 40000)}}, store.ErrMessageTooLarge},
		{"bad property", &record.Message{Topic: "T", Properties: map[string]string{"k": "a\u0002b"}}, record.ErrInvalidProperty},
	}
	for _, tc := range cases {
		if _, err := l.Append(context.Background(), tc.m); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Append(ctx, testMsg("T", 0, 1, 1)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	if got := l.Bounds().Max; got != before {
		t.Fatalf("max moved from %d to %d", before, got)
	}
	v, err := l.Read(before-100, 200)
	if err != nil {
		t.Fatal(err)
	}
	v.Release()
	// The bytes after max are still zero: nothing partial was written.
	seg, _ := segmentFor(l.segList(), before)
	if !isZero(seg.data[before-seg.start:]) {
		t.Fatal("bytes written past the max offset")
	}
	o := testOptions(t, 8192)
	o.MaxMessageSize = 200
	l2 := mustOpen(t, t.TempDir(), o)
	defer mustClose(t, l2)
	if _, err := l2.Append(context.Background(), testMsg("T", 0, 200, 1)); !errors.Is(err, store.ErrMessageTooLarge) {
		t.Fatalf("MaxMessageSize: %v", err)
	}
}

func TestCommitLogReadViews(t *testing.T) {
	const seg = 8192
	l := mustOpen(t, t.TempDir(), testOptions(t, seg))
	for l.Bounds().Max < 3*seg+100 {
		mustAppend(t, l, testMsg("T", 0, 700, 1))
	}
	b := l.Bounds()
	for off := b.Min; off < b.Max; off += 1000 {
		v, err := l.Read(off, 32<<10)
		if err != nil {
			t.Fatal(err)
		}
		if v.Offset != off || int64(len(v.Data)) != min(b.Max, (off/seg+1)*seg)-off {
			t.Fatalf("Read(%d): %d bytes", off, len(v.Data))
		}
		v.Release()
		v.Release() // a second Release through the same copy is a no-op
	}
	v, err := l.Read(b.Max, 100)
	if err != nil || len(v.Data) != 0 {
		t.Fatalf("Read(max) = %d bytes, %v", len(v.Data), err)
	}
	for _, off := range []int64{-1, b.Max + 1} {
		if _, err := l.Read(off, 100); !errors.Is(err, store.ErrOffsetOutOfRange) {
			t.Fatalf("Read(%d): %v", off, err)
		}
	}
	allocs := testing.AllocsPerRun(1000, func() {
		v, err := l.Read(100, 32<<10)
		if err != nil {
			t.Fatal(err)
		}
		v.Release()
	})
	if allocs != 0 {
		t.Fatalf("Read allocates %.1f times per call", allocs)
	}
	// A view outlives Close: the segment stays mapped until Release.
	v, err = l.Read(0, 4)
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	if binary.BigEndian.Uint32(v.Data) == 0 {
		t.Fatal("view lost its bytes")
	}
	v.Release()
}

func TestCommitLogWatch(t *testing.T) {
	l := mustOpen(t, t.TempDir(), testOptions(t, 8192))
	defer mustClose(t, l)
	ch := make(chan struct{}, 1)
	cancel := l.Watch(ch)
	off := mustAppend(t, l, testMsg("T", 0, 10, 1))
	mustAppend(t, l, testMsg("T", 0, 10, 2)) // coalesces
	<-ch
	select {
	case <-ch:
		t.Fatal("sends did not coalesce")
	default:
	}
	if err := l.Truncate(off); err != nil {
		t.Fatal(err)
	}
	<-ch
	cancel()
	cancel()
	mustAppend(t, l, testMsg("T", 0, 10, 3))
	select {
	case <-ch:
		t.Fatal("notified after cancel")
	default:
	}
}

func TestCommitLogMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	o := testOptions(t, 8192)
	o.Registerer = reg
	dir := t.TempDir()
	l := mustOpen(t, dir, o)
	res, _ := l.Append(context.Background(), testMsg("T", 0, 100, 1))
	if got := testutil.ToFloat64(l.m.appendedBytes); got != float64(res.Size) {
		t.Fatalf("appended_bytes_total %v, want %d", got, res.Size)
	}
	if err := l.checkpointNow(false); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "replicator_commitlog_flush_duration_seconds"); err != nil || n != 1 {
		t.Fatalf("flush histogram: %d, %v", n, err)
	}
	if got := testutil.ToFloat64(l.m.flushedOffset); got != float64(res.NextOffset) {
		t.Fatalf("flushed offset gauge %v", got)
	}
	mustClose(t, l)
	l = mustOpen(t, dir, o) // reopened on the same registry
	mustClose(t, l)
}

func TestCommitLogSegmentStarts(t *testing.T) {
	const seg = 4096
	dir := t.TempDir()
	l := mustOpen(t, dir, testOptions(t, seg))
	for i := range 20 {
		mustAppend(t, l, testMsg("T", 0, 300, int64(i)))
	}
	mustClose(t, l)
	segDir := filepath.Join(dir, "commitlog")
	// Files that are not segments are not listed: an older version's spare, a
	// name that is not 20 digits, a directory with a segment's name.
	for _, name := range []string{"00000000000000099999.tmp", "checkpoint", "0000000000000004096"} {
		if err := os.WriteFile(filepath.Join(segDir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(segDir, "00000000000001000000"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := SegmentStarts(segDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 2 {
		t.Fatalf("SegmentStarts = %v, want at least 2 segments for 20 messages of 300 bytes in %d-byte segments", got, seg)
	}
	for i, start := range got {
		if start != int64(i)*seg {
			t.Fatalf("SegmentStarts = %v, want 0, %d, ... in order", got, seg)
		}
	}
	if _, err := SegmentStarts(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("SegmentStarts of a missing directory: %v, want os.ErrNotExist", err)
	}
}
