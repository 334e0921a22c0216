package commitlog

import (
	"bytes"
	"context"
	"errors"
	"math/rand"
	"testing"

	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// replicate copies master's bytes from the replica's max offset in chunks
// of at most chunk bytes, as the HA writer does (a chunk never crosses a
// segment end), until the replica holds upto.
func replicate(t testing.TB, master, replica *Log, upto int64, r *rand.Rand, chunk int) {
	t.Helper()
	for {
		at := replica.Bounds().Max
		if at >= upto {
			return
		}
		v, err := master.Read(at, 1+r.Intn(chunk))
		if err != nil {
			t.Fatalf("master Read(%d): %v", at, err)
		}
		n := min(int64(len(v.Data)), upto-at)
		next, err := replica.AppendAt(at, v.Data[:n])
		v.Release()
		if err != nil || next != at+n {
			t.Fatalf("AppendAt(%d, %d bytes) = %d, %v", at, n, next, err)
		}
	}
}

func sameBytes(t testing.TB, a, b *Log, from, to int64) {
	t.Helper()
	for off := from; off < to; {
		va, err := a.Read(off, int(min(to-off, 1<<20)))
		if err != nil {
			t.Fatal(err)
		}
		vb, err := b.Read(off, len(va.Data))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(va.Data, vb.Data) {
			i := 0
			for va.Data[i] == vb.Data[i] {
				i++
			}
			t.Fatalf("bytes differ in [%d, %d), first at %d: %x vs %x", off, off+int64(len(va.Data)), off+int64(i), va.Data[i:min(i+16, len(va.Data))], vb.Data[i:min(i+16, len(vb.Data))])
		}
		off += int64(len(va.Data))
		va.Release()
		vb.Release()
	}
}

func TestCommitLogAppendAt(t *testing.T) {
	const seg = 4096
	r := rand.New(rand.NewSource(7))
	master := mustOpen(t, t.TempDir(), testOptions(t, seg))
	defer mustClose(t, master)
	for master.Bounds().Max < 6*seg+500 {
		mustAppend(t, master, testMsg("T", int32(r.Intn(2)), 20+r.Intn(900), r.Int63()))
	}
	mb := master.Bounds()

	rdir := t.TempDir()
	replica := mustOpen(t, rdir, testOptions(t, seg))
	// An empty replica starts at a segment boundary; elsewhere it refuses.
	if _, err := replica.AppendAt(seg+10, []byte{1}); !errors.Is(err, store.ErrOffsetMismatch) {
		t.Fatalf("unaligned start: %v", err)
	}
	replicate(t, master, replica, 3*seg+1234, r, 1000) // stops mid-record
	if _, err := replica.AppendAt(100, []byte{1}); !errors.Is(err, store.ErrOffsetMismatch) {
		t.Fatalf("behind max: %v", err)
	}
	at := replica.Bounds().Max
	if _, err := replica.AppendAt(at+1, []byte{1}); !errors.Is(err, store.ErrOffsetMismatch) {
		t.Fatalf("gap: %v", err)
	}
	if _, err := replica.AppendAt(at, make([]byte, seg)); !errors.Is(err, store.ErrSegmentOverflow) {
		t.Fatalf("crossing the segment end: %v", err)
	}
	if got, err := replica.AppendAt(at, nil); got != at || err != nil {
		t.Fatalf("empty AppendAt = %d, %v", got, err)
	}
	if _, err := replica.Append(context.Background(), testMsg("T", 0, 1, 1)); !errors.Is(err, store.ErrOffsetMismatch) {
		t.Fatalf("Append inside a partial record: %v", err)
	}
	// Close mid-record: recovery cuts the partial record; replication resumes.
	mustClose(t, replica)
	replica = mustOpen(t, rdir, testOptions(t, seg))
	if got := replica.Bounds().Max; got > at || got < at-1000 {
		t.Fatalf("reopened replica max %d, was %d", got, at)
	}
	replicate(t, master, replica, mb.Max, r, 1000)
	sameBytes(t, master, replica, 0, mb.Max)
	mustClose(t, replica)
	replica = mustOpen(t, rdir, testOptions(t, seg))
	defer mustClose(t, replica)
	if got := replica.Bounds(); got.Max != mb.Max || got.Min != 0 {
		t.Fatalf("replica bounds %+v, master %+v", got, mb)
	}
	// The replica rebuilt the queue table: promoted, it continues the queues.
	for q := int32(0); q < 2; q++ {
		want, err := master.Append(context.Background(), testMsg("T", q, 10, 1))
		if err != nil {
			t.Fatal(err)
		}
		got, err := replica.Append(context.Background(), testMsg("T", q, 10, 1))
		if err != nil || got.QueueOffset != want.QueueOffset || got.Offset != want.Offset {
			t.Fatalf("promoted replica: %+v, master %+v (%v)", got, want, err)
		}
	}

	// A replica that starts from the master's last segment (RocketMQ's rule
	// for an empty slave).
	last := mb.LastSegmentStart
	r2 := mustOpen(t, t.TempDir(), testOptions(t, seg))
	defer mustClose(t, r2)
	replicate(t, master, r2, 0, r, 1) // no-op: empty
	v, _ := master.Read(last, 300)
	if _, err := r2.AppendAt(last, v.Data); err != nil {
		t.Fatal(err)
	}
	v.Release()
	if b := r2.Bounds(); b.Min != last || b.Max != last+300 {
		t.Fatalf("bounds %+v", b)
	}
	// Truncate it back to empty, then restart it elsewhere.
	if err := r2.Truncate(last); err != nil {
		t.Fatal(err)
	}
	v, _ = master.Read(0, seg)
	if _, err := r2.AppendAt(0, v.Data); err != nil {
		t.Fatalf("restart an emptied log at 0: %v", err)
	}
	v.Release()
	if b := r2.Bounds(); b.Min != 0 || b.Max != seg {
		t.Fatalf("bounds %+v", b)
	}
	recs, _, err := r2.ReadMessages(0, 100)
	if err != nil || len(recs) == 0 || recs[0].PhysicalOffset != 0 {
		t.Fatalf("ReadMessages on the restarted replica: %d records, %v", len(recs), err)
	}
}

func TestCommitLogTruncate(t *testing.T) {
	const seg = 4096
	dir := t.TempDir()
	l := mustOpen(t, dir, testOptions(t, seg))
	var offs []int64
	for l.Bounds().Max < 4*seg {
		offs = append(offs, mustAppend(t, l, testMsg("T", 0, 300, int64(len(offs)))))
	}
	mx := l.Bounds().Max
	if err := l.Truncate(offs[3] + 1); !errors.Is(err, store.ErrNotBoundary) {
		t.Fatalf("mid-record: %v", err)
	}
	if err := l.Truncate(mx + 1); !errors.Is(err, store.ErrOffsetOutOfRange) {
		t.Fatalf("past max: %v", err)
	}
	if err := l.Truncate(mx); err != nil {
		t.Fatalf("at max: %v", err)
	}
	cut := offs[len(offs)/3]
	if err := l.Truncate(cut); err != nil {
		t.Fatal(err)
	}
	if b := l.Bounds(); b.Max != cut || b.Flushed > cut {
		t.Fatalf("bounds after truncate %+v", b)
	}
	keep := len(offs) / 3
	res, err := l.Append(context.Background(), testMsg("T", 0, 10, 1))
	if err != nil || res.Offset != cut || res.QueueOffset != int64(keep) {
		t.Fatalf("append after truncate: %+v %v", res, err)
	}
	mustClose(t, l)
	l = mustOpen(t, dir, testOptions(t, seg))
	defer mustClose(t, l)
	recs := readAll(t, l)
	if len(recs) != keep+1 {
		t.Fatalf("%d records after reopen, want %d", len(recs), keep+1)
	}
	if _, _, err := l.ReadMessages(offs[1]+7, 1); !errors.Is(err, store.ErrNotBoundary) {
		t.Fatalf("ReadMessages mid-record: %v", err)
	}
	_ = record.MagicCode
}
