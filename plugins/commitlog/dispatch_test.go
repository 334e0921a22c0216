package commitlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"maps"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/plugins/commitlog/vfs"
	"github.com/replicatorhq/replicator/sdk/record"
)

// dispatchState reads the dispatched offset and a copy of the queue table.
func dispatchState(l *Log) (int64, queueTable) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dispatched, l.queues.clone()
}

// TestDispatchBackground: replicated bytes are dispatched off the append
// path: AppendAt leaves the dispatched offset behind, the dispatcher
// catches up without any further call (polling with a deadline, the
// dispatcher is a real goroutine), across segment ends, to the table the
// master holds; the tail under dispatchBatch it leaves is drained by
// Close, whose checkpoint then holds the master's table at the max offset.
func TestDispatchBackground(t *testing.T) {
	const seg = 1 << 20
	master := mustOpen(t, t.TempDir(), testOptions(t, seg))
	defer mustClose(t, master)
	for i := 0; master.Bounds().Max < 3*seg+seg/2; i++ {
		mustAppend(t, master, testMsg([]string{"A", "B", "C"}[i%3], int32(i%4), 500+i%3000, int64(i)))
	}
	mend := master.Bounds().Max
	_, want := dispatchState(master)

	rdir := t.TempDir()
	replica := mustOpen(t, rdir, testOptions(t, seg))
	replicate(t, master, replica, mend, rand.New(rand.NewSource(1)), 32<<10)
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, _ := dispatchState(replica)
		if mend-d < dispatchBatch {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dispatched offset %d, max %d: the dispatcher did not catch up", d, mend)
		}
		time.Sleep(time.Millisecond)
	}
	closeAndCheckCheckpoint(t, replica, mend, want)
}

// TestDispatchInline: AppendAtFrom dispatches the records of the frames
// it receives as it publishes them, whatever the frame boundaries: after
// every append of small records the dispatched offset is within one
// record of the max offset (the dispatcher alone would let it trail by
// dispatchBatch), also across segment ends. A record larger than the fill
// buffer falls back to the dispatcher, and the inline walk starts again
// once it caught up; AppendAt in between does not confuse it. The queue
// table ends as the master's, and Close's checkpoint holds it.
func TestDispatchInline(t *testing.T) { testDispatchInline(t, false) }

// TestDispatchInlineViews is TestDispatchInline with the appends'
// bytes taken as views (pieces of 1 to 9 000 bytes, so records, their
// headers and the segment's filler are cut at every place, and the big
// record is larger than the fill buffer), each spoilt once the next one
// is taken: the walk over views finds the same records, queue offsets and
// dispatched offsets as the walk over the fill buffer.
func TestDispatchInlineViews(t *testing.T) { testDispatchInline(t, true) }

func testDispatchInline(t *testing.T, views bool) {
	const seg = 4 << 20
	const small = 3000 // bodies of the small records are under this
	r := rand.New(rand.NewSource(7))
	master := mustOpen(t, t.TempDir(), testOptions(t, seg))
	defer mustClose(t, master)
	fill := func(upto int64) {
		for i := 0; master.Bounds().Max < upto; i++ {
			mustAppend(t, master, testMsg([]string{"A", "B", "C"}[r.Intn(3)], int32(r.Intn(4)), 1+r.Intn(small), r.Int63()))
		}
	}
	fill(seg + seg/2) // phase 1: small records across a segment end
	end1 := master.Bounds().Max
	big := mustAppend(t, master, testMsg("B", 2, fillChunk+fillChunk/4, 1)) // phase 2
	end2 := master.Bounds().Max
	if big != end1 {
		t.Fatalf("big record at %d, want %d", big, end1)
	}
	fill(end2 + seg) // phase 3: small records again
	mend := master.Bounds().Max
	_, want := dispatchState(master)

	replica := mustOpen(t, t.TempDir(), testOptions(t, seg))
	step := func(upto int64, check bool) {
		t.Helper()
		for at := replica.Bounds().Max; at < upto; at = replica.Bounds().Max {
			if r.Intn(20) == 0 {
				replicate(t, master, replica, min(upto, at+1+int64(r.Intn(5000))), r, 5000)
				continue
			}
			replicateVia(t, master, replica, min(upto, at+1+int64(r.Intn(40<<10))), r, 40<<10, views)
			if d, _ := dispatchState(replica); check && replica.Bounds().Max-d > small+200 {
				t.Fatalf("after an append to %d the dispatched offset is %d", replica.Bounds().Max, d)
			}
		}
	}
	// An AppendAtFrom after AppendAt copies the few bytes since the
	// dispatched offset from the mapping and walks on from there.
	step(end1, true)
	d, _ := dispatchState(replica)
	if end1-d > small+200 {
		t.Fatalf("phase 1: dispatched %d of %d", d, end1)
	}
	step(end2, false)
	deadline := time.Now().Add(30 * time.Second)
	for d, _ := dispatchState(replica); d != end2; d, _ = dispatchState(replica) {
		if time.Now().After(deadline) {
			t.Fatalf("dispatched offset %d: the dispatcher did not reach %d after the big record", d, end2)
		}
		time.Sleep(time.Millisecond)
	}
	for at := end2; at < mend; at = replica.Bounds().Max {
		replicateVia(t, master, replica, min(mend, at+1+int64(r.Intn(40<<10))), r, 40<<10, views)
		if d, _ := dispatchState(replica); replica.Bounds().Max-d > small+200 {
			t.Fatalf("phase 3: after an append to %d the dispatched offset is %d", replica.Bounds().Max, d)
		}
	}
	d, got := dispatchState(replica)
	if d != mend || !maps.EqualFunc(got, want, maps.Equal) {
		t.Fatalf("dispatched %d (want %d), queues %v (want %v)", d, mend, got, want)
	}
	closeAndCheckCheckpoint(t, replica, mend, want)
}

// TestShortMatchesVerifyHeader: the inline walk's allocation-free check
// for a partial record says short exactly where record.VerifyHeader
// returns record.ErrShort, for every prefix of a record and of a filler,
// and never for a whole record followed by more bytes.
func TestShortMatchesVerifyHeader(t *testing.T) {
	rec, err := record.Encode(nil, testMsg("T", 1, 300, 7), 3, 4096, 5)
	if err != nil {
		t.Fatal(err)
	}
	filler := make([]byte, 64)
	binary.BigEndian.PutUint32(filler, 64)
	binary.BigEndian.PutUint32(filler[4:], record.BlankMagic)
	for _, whole := range [][]byte{rec, append(slices.Clone(rec), rec...), filler} {
		for n := 0; n <= len(whole); n++ {
			b := whole[:n]
			_, verr := record.VerifyHeader(b)
			if got, want := short(b), errors.Is(verr, record.ErrShort); got != want {
				t.Fatalf("%d of %d bytes: short %v, VerifyHeader %v", n, len(whole), got, verr)
			}
		}
	}
	if short(rec) {
		t.Fatalf("a whole record (%d bytes) is short", len(rec))
	}
}

// FuzzShort: whatever the bytes, short never claims a partial record
// where record.VerifyHeader would not (it would hide a corrupt record
// or a filler from the walk), and agrees with it on the usual case.
func FuzzShort(f *testing.F) {
	rec, err := record.Encode(nil, testMsg("T", 1, 300, 7), 3, 4096, 5)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(rec)
	f.Add(rec[:100])
	f.Add(rec[:5])
	f.Add([]byte{0, 0, 0, 64, 0xCB, 0xD4, 0x31, 0x94})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, verr := record.VerifyHeader(b)
		if got, want := short(b), errors.Is(verr, record.ErrShort); got != want {
			t.Fatalf("% x: short %v, VerifyHeader %v", b[:min(len(b), 16)], got, verr)
		}
	})
}

// TestDispatchInlineViewSplits: the walk over views meets records, their
// headers, segment-end fillers and segment tails cut at every kind of
// place (views of 1 byte up to several records, frames up to 20 KiB,
// 64 KiB segments, so a filler ends every segment): after every append the
// dispatched offset is within one record of the max offset, and the queue
// table and the dispatched offset end as the master's. A record larger
// than the fill buffer then stops the walk there (the dispatcher takes
// over, Close drains it: its checkpoint holds the master's table).
func TestDispatchInlineViewSplits(t *testing.T) {
	const seg = 64 << 10
	const small = 3000
	r := rand.New(rand.NewSource(8))
	master := mustOpen(t, t.TempDir(), testOptions(t, seg))
	defer mustClose(t, master)
	for master.Bounds().Max < 12*seg {
		mustAppend(t, master, testMsg([]string{"A", "BB", "C"}[r.Intn(3)], int32(r.Intn(3)), 1+r.Intn(small), r.Int63()))
	}
	mend := master.Bounds().Max
	_, want := dispatchState(master)

	replica := mustOpen(t, t.TempDir(), testOptions(t, seg))
	defer mustClose(t, replica)
	for at := int64(0); at < mend; at = replica.Bounds().Max {
		v, err := master.Read(at, 1+r.Intn(20<<10))
		if err != nil {
			t.Fatal(err)
		}
		data := bytes.Clone(v.Data)
		v.Release()
		piece := []int{1, 2, 7, 13, 100, 5000, 20 << 10}[r.Intn(7)]
		if _, err := replica.AppendAtFrom(at, len(data), &viewPieces{pieceReader: pieceReader{data: data, r: r, max: piece}}); err != nil {
			t.Fatalf("AppendAtFrom(%d, %d bytes): %v", at, len(data), err)
		}
		if d, _ := dispatchState(replica); replica.Bounds().Max-d > small+200 {
			t.Fatalf("after an append to %d (views of up to %d bytes) the dispatched offset is %d", replica.Bounds().Max, piece, d)
		}
	}
	d, got := dispatchState(replica)
	if d != mend || !maps.EqualFunc(got, want, maps.Equal) {
		t.Fatalf("dispatched %d (want %d), queues %v (want %v)", d, mend, got, want)
	}
}

// TestDispatchInlineViewBig: with views, a record larger than the fill
// buffer stops the inline walk at its start (the dispatched offset stays
// there while it streams in), the dispatcher takes over, and Close's
// checkpoint holds the master's queue table at the max offset.
func TestDispatchInlineViewBig(t *testing.T) {
	const seg = 4 << 20
	r := rand.New(rand.NewSource(9))
	master := mustOpen(t, t.TempDir(), testOptions(t, seg))
	defer mustClose(t, master)
	for range 50 {
		mustAppend(t, master, testMsg("A", 1, 1+r.Intn(3000), r.Int63()))
	}
	big := mustAppend(t, master, testMsg("B", 2, fillChunk+fillChunk/4, 1))
	for range 50 {
		mustAppend(t, master, testMsg("A", 1, 1+r.Intn(3000), r.Int63()))
	}
	mend := master.Bounds().Max
	_, want := dispatchState(master)

	dir := t.TempDir()
	replica := mustOpen(t, dir, testOptions(t, seg))
	for at := int64(0); at < mend; at = replica.Bounds().Max {
		v, err := master.Read(at, 32<<10)
		if err != nil {
			t.Fatal(err)
		}
		data := bytes.Clone(v.Data)
		v.Release()
		if _, err := replica.AppendAtFrom(at, len(data), &viewPieces{pieceReader: pieceReader{data: data, r: r, max: 9000}}); err != nil {
			t.Fatal(err)
		}
		if m := replica.Bounds().Max; m > big && m < big+fillChunk {
			if d, _ := dispatchState(replica); d != big {
				t.Fatalf("inside the big record (max %d) the dispatched offset is %d, want its start %d", m, d, big)
			}
		}
	}
	closeAndCheckCheckpoint(t, replica, mend, want)
}

// closeAndCheckCheckpoint closes replica and checks that the checkpoint
// Close wrote scanned to mend and holds the queue table want.
func closeAndCheckCheckpoint(t *testing.T, replica *Log, mend int64, want queueTable) {
	t.Helper()
	mustClose(t, replica)
	c, err := readCheckpoint(vfs.Default, replica.ckptPath)
	if err != nil {
		t.Fatal(err)
	}
	if c.Scan != mend || !maps.EqualFunc(c.Queues, want, maps.Equal) {
		t.Fatalf("checkpoint after Close: scan %d (want %d), queues %v (want %v)", c.Scan, mend, c.Queues, want)
	}
}
