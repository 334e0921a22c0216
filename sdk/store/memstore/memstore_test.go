package memstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/sdk/store/memstore"
	"github.com/replicatorhq/replicator/sdk/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConformance runs the sdk/storetest suite; a directory names one log,
// and opening it again reopens the closed store that used it.
func TestConformance(t *testing.T) {
	var mu sync.Mutex
	dirs := map[string]*memstore.Store{}
	storetest.Run(t, func(t *testing.T, dir string, segSize int64) store.Store {
		mu.Lock()
		defer mu.Unlock()
		st := dirs[dir]
		if st == nil {
			st = memstore.New(segSize)
		} else {
			var err error
			if st, err = st.Reopen(); err != nil {
				t.Fatal(err)
			}
		}
		dirs[dir] = st
		return st
	})
}

func msg(n int) *record.Message {
	return &record.Message{Topic: "T", Body: make([]byte, n)}
}

// TestAppendAtEmptyBoundary: an empty log starts anywhere on a segment
// boundary and nowhere else; a started log takes only its max offset.
func TestAppendAtEmptyBoundary(t *testing.T) {
	st := memstore.New(4096)
	if _, err := st.AppendAt(100, []byte{1}); !errors.Is(err, store.ErrOffsetMismatch) {
		t.Fatalf("AppendAt(100) on an empty log: %v, want ErrOffsetMismatch", err)
	}
	if max, err := st.AppendAt(8192, []byte{1, 2, 3}); err != nil || max != 8195 {
		t.Fatalf("AppendAt(8192) on an empty log = %d, %v", max, err)
	}
	if b := st.Bounds(); b.Min != 8192 || b.Max != 8195 || b.LastSegmentStart != 8192 {
		t.Fatalf("bounds %+v", b)
	}
	if _, err := st.AppendAt(4096, []byte{1}); !errors.Is(err, store.ErrOffsetMismatch) {
		t.Fatalf("AppendAt(4096) on a started log: %v, want ErrOffsetMismatch", err)
	}
}

// TestAppendAfterJunk: bytes that are not records stop the queue offsets,
// and Append refuses to write behind them until a Truncate.
func TestAppendAfterJunk(t *testing.T) {
	st := memstore.New(4096)
	a, err := st.Append(context.Background(), msg(10))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AppendAt(a.NextOffset, make([]byte, 50)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(context.Background(), msg(10)); !errors.Is(err, store.ErrOffsetMismatch) {
		t.Fatalf("Append behind junk: %v, want ErrOffsetMismatch", err)
	}
	if err := st.Truncate(a.NextOffset); err != nil {
		t.Fatalf("Truncate to the last record's end: %v", err)
	}
	b, err := st.Append(context.Background(), msg(10))
	if err != nil || b.Offset != a.NextOffset || b.QueueOffset != 1 {
		t.Fatalf("Append after the cut: %+v, %v", b, err)
	}
}

// TestViewSurvivesTruncate: a view taken before a Truncate keeps its
// bytes while later appends reuse the offsets.
func TestViewSurvivesTruncate(t *testing.T) {
	st := memstore.New(4096)
	a, err := st.Append(context.Background(), &record.Message{Topic: "T", Body: []byte("first")})
	if err != nil {
		t.Fatal(err)
	}
	v, err := st.Read(a.Offset, int(a.Size))
	if err != nil {
		t.Fatal(err)
	}
	defer v.Release()
	if err := st.Truncate(a.Offset); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(context.Background(), &record.Message{Topic: "T", Body: []byte("other")}); err != nil {
		t.Fatal(err)
	}
	rec, err := record.Decode(v.Data)
	if err != nil || string(rec.Body) != "first" {
		t.Fatalf("view after truncate and append: %q, %v", rec.Body, err)
	}
}

func TestReopen(t *testing.T) {
	st := memstore.New(4096)
	if _, err := st.Reopen(); !errors.Is(err, memstore.ErrOpen) {
		t.Fatalf("Reopen of an open store: %v, want ErrOpen", err)
	}
	a, err := st.Append(context.Background(), msg(5))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	re, err := st.Reopen()
	if err != nil {
		t.Fatal(err)
	}
	if b := re.Bounds(); b.Max != a.NextOffset || b.Flushed != a.NextOffset {
		t.Fatalf("reopened bounds %+v, want max %d", b, a.NextOffset)
	}
	if _, err := st.Reopen(); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("second Reopen: %v, want ErrClosed", err)
	}
}

// TestDeleteSegmentsBefore: whole segments below the offset go, never the
// one holding the last byte; records above stay readable.
func TestDeleteSegmentsBefore(t *testing.T) {
	st := memstore.New(1024)
	var last store.AppendResult
	for st.Bounds().Max < 3*1024+100 {
		var err error
		if last, err = st.Append(context.Background(), msg(100)); err != nil {
			t.Fatal(err)
		}
	}
	if min, err := st.DeleteSegmentsBefore(2500); err != nil || min != 2048 {
		t.Fatalf("DeleteSegmentsBefore(2500) = %d, %v; want 2048", min, err)
	}
	if _, err := st.Read(2000, 10); !errors.Is(err, store.ErrOffsetOutOfRange) {
		t.Fatalf("Read below the new min: %v, want ErrOffsetOutOfRange", err)
	}
	if recs, _, err := st.ReadMessages(2048, 100); err != nil || recs[len(recs)-1].PhysicalOffset != last.Offset {
		t.Fatalf("ReadMessages from the new min: %d records, %v", len(recs), err)
	}
	if min, _ := st.DeleteSegmentsBefore(1 << 20); min != 3072 {
		t.Fatalf("DeleteSegmentsBefore past the max kept min %d, want the last segment 3072", min)
	}
	if b := st.Bounds(); b.Max != last.NextOffset {
		t.Fatalf("max moved to %d", b.Max)
	}
}

// TestGrow: growing keeps the bytes and the appends after it.
func TestGrow(t *testing.T) {
	st := memstore.New(1 << 20)
	if _, err := st.AppendAt(0, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	st.Grow(1 << 16)
	if _, err := st.AppendAt(3, []byte("def")); err != nil {
		t.Fatal(err)
	}
	v, err := st.Read(0, 100)
	if err != nil || string(v.Data) != "abcdef" {
		t.Fatalf("after Grow: %q, %v", v.Data, err)
	}
}

// TestTruncateRewindsQueues: after a cut, each queue continues at the
// queue offset of its first record that was cut.
func TestTruncateRewindsQueues(t *testing.T) {
	st := memstore.New(4096)
	var res []store.AppendResult
	for i := range 6 {
		a, err := st.Append(context.Background(), &record.Message{Topic: "T", QueueID: int32(i % 2), Body: []byte{byte(i)}})
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, a)
	}
	if err := st.Truncate(res[3].Offset); err != nil { // cuts queue 1's #1 and queue 0's #2
		t.Fatal(err)
	}
	for q, want := range []int64{2, 1} {
		a, err := st.Append(context.Background(), &record.Message{Topic: "T", QueueID: int32(q)})
		if err != nil || a.QueueOffset != want {
			t.Fatalf("queue %d after the cut: queue offset %d, %v; want %d", q, a.QueueOffset, err, want)
		}
	}
}
