package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"

	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// Factory opens the store under test in dir with segments of segSize bytes
// (the suite uses small segments to cross boundaries quickly). Opening the
// same dir again must recover what was stored (the restart tests).
type Factory func(t *testing.T, dir string, segSize int64) store.Store

// SegmentSize is the segment size the suite asks for.
const SegmentSize = 64 << 10

// Run runs the whole suite against the stores that open makes.
func Run(t *testing.T, open Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open Factory)
	}{
		{"Empty", testEmpty},
		{"AppendRead", testAppendRead},
		{"SegmentBoundaries", testSegmentBoundaries},
		{"AppendAt", testAppendAt},
		{"AppendAtEmptyMidLog", testAppendAtMidLog},
		{"ScanRecords", testScanRecords},
		{"Truncate", testTruncate},
		{"Errors", testErrors},
		{"Watch", testWatch},
		{"ConcurrentAppend", testConcurrentAppend},
		{"Restart", testRestart},
		{"ReplicaRestart", testReplicaRestart},
		{"ReplicaQueueOffsets", testReplicaQueueOffsets},
		{"Closed", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open) })
	}
}

func openStore(t *testing.T, open Factory, dir string) store.Store {
	t.Helper()
	st := open(t, dir, SegmentSize)
	if st == nil {
		t.Fatal("factory returned a nil store")
	}
	return st
}

func closeStore(t *testing.T, st store.Store) {
	t.Helper()
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// message returns a deterministic message i of a seeded stream.
func message(r *rand.Rand, i int) *record.Message {
	body := make([]byte, 1+r.IntN(2000))
	for j := range body {
		body[j] = byte(r.Uint32())
	}
	m := &record.Message{
		Topic:         fmt.Sprintf("Topic%d", i%3),
		QueueID:       int32(i % 2),
		Flag:          int32(i),
		Body:          body,
		SysFlag:       0,
		BornTimestamp: 1_700_000_000_000 + int64(i),
		BornHost:      netip.MustParseAddrPort("10.0.0.1:5000"),
		StoreHost:     netip.MustParseAddrPort("10.0.0.2:10911"),
	}
	if i%4 == 0 {
		m.Properties = map[string]string{"KEYS": fmt.Sprintf("k%d", i), "TAGS": "tagA"}
	}
	return m
}

func appendN(t *testing.T, st store.Store, r *rand.Rand, from, n int) ([]*record.Message, []store.AppendResult) {
	t.Helper()
	msgs := make([]*record.Message, n)
	res := make([]store.AppendResult, n)
	for i := range n {
		msgs[i] = message(r, from+i)
		var err error
		res[i], err = st.Append(context.Background(), msgs[i])
		if err != nil {
			t.Fatalf("Append %d: %v", from+i, err)
		}
	}
	return msgs, res
}

func sameMessage(t *testing.T, i int, got record.Message, want *record.Message) {
	t.Helper()
	switch {
	case got.Topic != want.Topic, got.QueueID != want.QueueID, got.Flag != want.Flag,
		!bytes.Equal(got.Body, want.Body), got.BornTimestamp != want.BornTimestamp,
		got.BornHost != want.BornHost, got.StoreHost != want.StoreHost,
		got.ReconsumeTimes != want.ReconsumeTimes, got.PreparedTransactionOffset != want.PreparedTransactionOffset:
		t.Fatalf("record %d: got %+v, want %+v", i, got, *want)
	}
	if len(got.Properties) != len(want.Properties) {
		t.Fatalf("record %d: properties %v, want %v", i, got.Properties, want.Properties)
	}
	for k, v := range want.Properties {
		if got.Properties[k] != v {
			t.Fatalf("record %d: property %q = %q, want %q", i, k, got.Properties[k], v)
		}
	}
}

// readAll reads every record from the store's min offset with ReadMessages
// in small steps.
func readAll(t *testing.T, st store.Store) []record.Record {
	t.Helper()
	var out []record.Record
	off := st.Bounds().Min
	for {
		recs, next, err := st.ReadMessages(off, 7)
		if err != nil {
			t.Fatalf("ReadMessages(%d): %v", off, err)
		}
		if len(recs) == 0 {
			if next < off {
				t.Fatalf("ReadMessages(%d) went back to %d", off, next)
			}
			return out
		}
		if next <= off {
			t.Fatalf("ReadMessages(%d) returned %d records and next %d", off, len(recs), next)
		}
		out = append(out, recs...)
		off = next
	}
}

// readBytes reads [from, to) with Read in steps of at most step bytes,
// checking the view rules, and returns the bytes with the views' offsets.
func readBytes(t *testing.T, st store.Store, from, to int64, step int) []byte {
	t.Helper()
	segSize := st.Bounds().SegmentSize
	var out []byte
	for off := from; off < to; {
		v, err := st.Read(off, step)
		if err != nil {
			t.Fatalf("Read(%d, %d): %v", off, step, err)
		}
		if v.Offset != off {
			t.Fatalf("Read(%d): view at %d", off, v.Offset)
		}
		n := int64(len(v.Data))
		if n == 0 || n > int64(step) {
			t.Fatalf("Read(%d, %d): %d bytes below the max offset %d", off, step, n, to)
		}
		if segSize > 0 && off/segSize != (off+n-1)/segSize {
			t.Fatalf("Read(%d): %d bytes cross the segment end %d", off, n, (off/segSize+1)*segSize)
		}
		out = append(out, v.Data...)
		v.Release()
		v.Release() // a second release of the same copy is harmless
		off += n
	}
	return out
}

func testEmpty(t *testing.T, open Factory) {
	st := openStore(t, open, t.TempDir())
	defer closeStore(t, st)
	b := st.Bounds()
	if b.Min != b.Max || b.Min != 0 {
		t.Fatalf("empty store bounds %+v, want Min == Max == 0", b)
	}
	if b.SegmentSize <= 0 {
		t.Fatalf("SegmentSize %d", b.SegmentSize)
	}
	v, err := st.Read(b.Max, 4096)
	if err != nil || len(v.Data) != 0 {
		t.Fatalf("Read at the max offset: %d bytes, %v; want an empty view", len(v.Data), err)
	}
	v.Release()
	recs, next, err := st.ReadMessages(b.Max, 10)
	if err != nil || len(recs) != 0 || next != b.Max {
		t.Fatalf("ReadMessages on an empty store: %d records, next %d, %v", len(recs), next, err)
	}
}

func testAppendRead(t *testing.T, open Factory) {
	st := openStore(t, open, t.TempDir())
	defer closeStore(t, st)
	r := rand.New(rand.NewPCG(1, 2))
	msgs, res := appendN(t, st, r, 0, 40)
	queues := map[string]int64{}
	prev := int64(0)
	for i, a := range res {
		if i > 0 && a.Offset < prev {
			t.Fatalf("append %d at %d, before the previous end %d", i, a.Offset, prev)
		}
		if a.NextOffset != a.Offset+int64(a.Size) || a.Size < record.MinRecordSize {
			t.Fatalf("append %d: result %+v", i, a)
		}
		k := fmt.Sprintf("%s/%d", msgs[i].Topic, msgs[i].QueueID)
		if a.QueueOffset != queues[k] {
			t.Fatalf("append %d: queue offset %d, want %d", i, a.QueueOffset, queues[k])
		}
		queues[k]++
		if a.StoreTimestamp <= 0 {
			t.Fatalf("append %d: store timestamp %d", i, a.StoreTimestamp)
		}
		prev = a.NextOffset
	}
	if b := st.Bounds(); b.Max != prev {
		t.Fatalf("Max %d after the last append ending at %d", b.Max, prev)
	}
	recs := readAll(t, st)
	if len(recs) != len(msgs) {
		t.Fatalf("read %d records, want %d", len(recs), len(msgs))
	}
	for i, rec := range recs {
		sameMessage(t, i, rec.Message, msgs[i])
		if rec.PhysicalOffset != res[i].Offset || rec.QueueOffset != res[i].QueueOffset || rec.TotalSize != res[i].Size || rec.StoreTimestamp != res[i].StoreTimestamp {
			t.Fatalf("record %d: %+v, append result %+v", i, rec, res[i])
		}
	}
	// The raw bytes decode to the same records.
	raw := readBytes(t, st, 0, prev, 1000)
	for i, a := range res {
		rec, err := record.Decode(raw[a.Offset:a.NextOffset])
		if err != nil {
			t.Fatalf("raw record %d: %v", i, err)
		}
		sameMessage(t, i, rec.Message, msgs[i])
	}
	// ReadMessages from the middle (a record boundary).
	recs, _, err := st.ReadMessages(res[10].Offset, 3)
	if err != nil || len(recs) != 3 || recs[0].PhysicalOffset != res[10].Offset {
		t.Fatalf("ReadMessages from record 10: %d records, %v", len(recs), err)
	}
}

func testSegmentBoundaries(t *testing.T, open Factory) {
	st := openStore(t, open, t.TempDir())
	defer closeStore(t, st)
	seg := st.Bounds().SegmentSize
	r := rand.New(rand.NewPCG(3, 4))
	var msgs []*record.Message
	var res []store.AppendResult
	for i := 0; st.Bounds().Max < 3*seg+seg/2; i++ {
		m, a := appendN(t, st, r, i, 1)
		msgs, res = append(msgs, m...), append(res, a...)
	}
	for i, a := range res {
		if a.Offset/seg != (a.NextOffset-1)/seg {
			t.Fatalf("record %d [%d, %d) spans a segment end", i, a.Offset, a.NextOffset)
		}
	}
	b := st.Bounds()
	if b.LastSegmentStart != 3*seg {
		t.Fatalf("LastSegmentStart %d, want %d", b.LastSegmentStart, 3*seg)
	}
	recs := readAll(t, st)
	if len(recs) != len(msgs) {
		t.Fatalf("read %d records across segments, want %d", len(recs), len(msgs))
	}
	for i := range recs {
		sameMessage(t, i, recs[i].Message, msgs[i])
	}
	// Large reads stop at each segment end.
	readBytes(t, st, 0, b.Max, int(seg))
	v, err := st.Read(seg-100, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Data) > 100 {
		t.Fatalf("Read 100 bytes before a segment end returned %d bytes", len(v.Data))
	}
	v.Release()
}

// replicate copies src's bytes [from, to) into dst with AppendAt in chunks
// that never cross a segment end, as a slave does.
func replicate(t *testing.T, src, dst store.Store, from, to int64, step int) {
	t.Helper()
	for off := from; off < to; {
		v, err := src.Read(off, step)
		if err != nil {
			t.Fatalf("source Read(%d): %v", off, err)
		}
		max, err := dst.AppendAt(off, v.Data)
		if err != nil {
			t.Fatalf("AppendAt(%d, %d bytes): %v", off, len(v.Data), err)
		}
		off += int64(len(v.Data))
		v.Release()
		if max != off {
			t.Fatalf("AppendAt returned max %d, want %d", max, off)
		}
	}
}

func testAppendAt(t *testing.T, open Factory) {
	src := openStore(t, open, t.TempDir())
	defer closeStore(t, src)
	dst := openStore(t, open, t.TempDir())
	defer closeStore(t, dst)
	seg := src.Bounds().SegmentSize
	r := rand.New(rand.NewPCG(5, 6))
	var msgs []*record.Message
	for i := 0; src.Bounds().Max < 2*seg+seg/3; i++ {
		m, _ := appendN(t, src, r, i, 1)
		msgs = append(msgs, m...)
	}
	max := src.Bounds().Max
	// 3000-byte chunks split records: a slave receives them that way.
	replicate(t, src, dst, 0, max, 3000)
	if b := dst.Bounds(); b.Max != max {
		t.Fatalf("replica Max %d, want %d", b.Max, max)
	}
	recs := readAll(t, dst)
	if len(recs) != len(msgs) {
		t.Fatalf("replica has %d records, want %d", len(recs), len(msgs))
	}
	for i := range recs {
		sameMessage(t, i, recs[i].Message, msgs[i])
	}
	if !bytes.Equal(readBytes(t, dst, 0, max, 8192), readBytes(t, src, 0, max, 8192)) {
		t.Fatal("replica bytes differ from the source")
	}
	// Not at the max offset: ErrOffsetMismatch, never a gap.
	if _, err := dst.AppendAt(max+1, []byte{1}); !errors.Is(err, store.ErrOffsetMismatch) {
		t.Fatalf("AppendAt past the max offset: %v, want ErrOffsetMismatch", err)
	}
	if _, err := dst.AppendAt(max-1, []byte{1}); !errors.Is(err, store.ErrOffsetMismatch) {
		t.Fatalf("AppendAt below the max offset: %v, want ErrOffsetMismatch", err)
	}
	// Across a segment end: ErrSegmentOverflow.
	segEnd := (max/seg + 1) * seg
	big := make([]byte, segEnd-max+10)
	if _, err := dst.AppendAt(max, big); !errors.Is(err, store.ErrSegmentOverflow) {
		t.Fatalf("AppendAt across a segment end: %v, want ErrSegmentOverflow", err)
	}
	if b := dst.Bounds(); b.Max != max {
		t.Fatalf("failed appends moved Max to %d", b.Max)
	}
}

// testAppendAtMidLog: a new slave starts at its master's last segment.
func testAppendAtMidLog(t *testing.T, open Factory) {
	src := openStore(t, open, t.TempDir())
	defer closeStore(t, src)
	seg := src.Bounds().SegmentSize
	r := rand.New(rand.NewPCG(7, 8))
	for src.Bounds().Max < seg+seg/2 {
		appendN(t, src, r, 0, 1)
	}
	b := src.Bounds()
	dir := t.TempDir()
	dst := openStore(t, open, dir)
	replicate(t, src, dst, b.LastSegmentStart, b.Max, 5000)
	db := dst.Bounds()
	if db.Max != b.Max || db.Min > b.LastSegmentStart || db.LastSegmentStart != b.LastSegmentStart {
		t.Fatalf("replica bounds %+v, source %+v", db, b)
	}
	got := readBytes(t, dst, b.LastSegmentStart, b.Max, 4096)
	if !bytes.Equal(got, readBytes(t, src, b.LastSegmentStart, b.Max, 4096)) {
		t.Fatal("replica bytes differ from the source")
	}
	closeStore(t, dst)
	dst = openStore(t, open, dir)
	defer closeStore(t, dst)
	if rb := dst.Bounds(); rb.Max != b.Max {
		t.Fatalf("after a restart the replica's Max is %d, want %d", rb.Max, b.Max)
	}
}

func testTruncate(t *testing.T, open Factory) {
	dir := t.TempDir()
	st := openStore(t, open, dir)
	seg := st.Bounds().SegmentSize
	r := rand.New(rand.NewPCG(9, 10))
	var msgs []*record.Message
	var res []store.AppendResult
	for i := 0; st.Bounds().Max < 2*seg+seg/2; i++ {
		m, a := appendN(t, st, r, i, 1)
		msgs, res = append(msgs, m...), append(res, a...)
	}
	// Not a record boundary.
	if err := st.Truncate(res[3].Offset + 1); !errors.Is(err, store.ErrNotBoundary) {
		t.Fatalf("Truncate inside a record: %v, want ErrNotBoundary", err)
	}
	if err := st.Truncate(st.Bounds().Max + 1); err == nil {
		t.Fatal("Truncate past the max offset succeeded")
	}
	// Back into the first segment: later segments go.
	cut := len(res) / 4
	ch := make(chan struct{}, 1)
	cancel := st.Watch(ch)
	if err := st.Truncate(res[cut].Offset); err != nil {
		t.Fatalf("Truncate(%d): %v", res[cut].Offset, err)
	}
	<-ch
	cancel()
	if b := st.Bounds(); b.Max != res[cut].Offset {
		t.Fatalf("Max %d after Truncate(%d)", b.Max, res[cut].Offset)
	}
	recs := readAll(t, st)
	if len(recs) != cut {
		t.Fatalf("%d records after the cut, want %d", len(recs), cut)
	}
	if _, err := st.Read(res[cut].Offset+1, 10); !errors.Is(err, store.ErrOffsetOutOfRange) {
		t.Fatalf("Read past the new max: %v, want ErrOffsetOutOfRange", err)
	}
	// Appends continue at the cut, with fresh bytes.
	m2, a2 := appendN(t, st, rand.New(rand.NewPCG(99, 99)), 1000, 5)
	if a2[0].Offset != res[cut].Offset {
		t.Fatalf("append after Truncate at %d, want %d", a2[0].Offset, res[cut].Offset)
	}
	recs = readAll(t, st)
	for i := range m2 {
		sameMessage(t, cut+i, recs[cut+i].Message, m2[i])
	}
	raw := readBytes(t, st, a2[0].Offset, a2[4].NextOffset, 4096)
	if rec, err := record.Decode(raw); err != nil || !bytes.Equal(rec.Body, m2[0].Body) {
		t.Fatalf("raw read after truncate+append: %v", err)
	}
	// Cut records never come back.
	closeStore(t, st)
	st = openStore(t, open, dir)
	defer closeStore(t, st)
	if b := st.Bounds(); b.Max != a2[4].NextOffset {
		t.Fatalf("after a restart Max is %d, want %d", b.Max, a2[4].NextOffset)
	}
	if n := len(readAll(t, st)); n != cut+5 {
		t.Fatalf("after a restart %d records, want %d", n, cut+5)
	}
}

func testErrors(t *testing.T, open Factory) {
	st := openStore(t, open, t.TempDir())
	defer closeStore(t, st)
	_, res := appendN(t, st, rand.New(rand.NewPCG(11, 12)), 0, 5)
	max := st.Bounds().Max
	if _, err := st.Read(max+1, 10); !errors.Is(err, store.ErrOffsetOutOfRange) {
		t.Fatalf("Read past max: %v, want ErrOffsetOutOfRange", err)
	}
	if _, err := st.Read(-1, 10); !errors.Is(err, store.ErrOffsetOutOfRange) {
		t.Fatalf("Read at -1: %v, want ErrOffsetOutOfRange", err)
	}
	if _, _, err := st.ReadMessages(max+100, 1); !errors.Is(err, store.ErrOffsetOutOfRange) {
		t.Fatalf("ReadMessages past max: %v, want ErrOffsetOutOfRange", err)
	}
	if _, _, err := st.ReadMessages(res[1].Offset+3, 1); !errors.Is(err, store.ErrNotBoundary) && !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("ReadMessages inside a record: %v, want ErrNotBoundary or ErrCorrupt", err)
	}
	for _, topic := range []string{"", "bad topic", string(make([]byte, 200))} {
		_, err := st.Append(context.Background(), &record.Message{Topic: topic, Body: []byte("x")})
		if !errors.Is(err, store.ErrInvalidTopic) {
			t.Fatalf("Append with topic %q: %v, want ErrInvalidTopic", topic, err)
		}
	}
	seg := st.Bounds().SegmentSize
	if _, err := st.Append(context.Background(), &record.Message{Topic: "T", Body: make([]byte, seg)}); !errors.Is(err, store.ErrMessageTooLarge) {
		t.Fatalf("Append of a message larger than a segment: %v, want ErrMessageTooLarge", err)
	}
	if b := st.Bounds(); b.Max != max {
		t.Fatalf("failed appends moved Max from %d to %d", max, b.Max)
	}
}

func testWatch(t *testing.T, open Factory) {
	st := openStore(t, open, t.TempDir())
	defer closeStore(t, st)
	ch := make(chan struct{}, 1)
	cancel := st.Watch(ch)
	defer cancel()
	r := rand.New(rand.NewPCG(13, 14))
	for i := range 3 {
		_, res := appendN(t, st, r, i, 1)
		<-ch // Append changed the max offset
		if st.Bounds().Max < res[0].NextOffset {
			t.Fatalf("woken with Max %d below %d", st.Bounds().Max, res[0].NextOffset)
		}
	}
	ch2 := make(chan struct{}, 1)
	cancel2 := st.Watch(ch2)
	cancel2()
	cancel2() // idempotent
}

func testConcurrentAppend(t *testing.T, open Factory) {
	st := openStore(t, open, t.TempDir())
	defer closeStore(t, st)
	const workers, each = 8, 40
	var mu sync.Mutex
	seen := map[int64]store.AppendResult{}
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 15))
			for i := range each {
				a, err := st.Append(context.Background(), message(r, w*each+i))
				if err != nil {
					errc <- err
					return
				}
				mu.Lock()
				seen[a.Offset] = a
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("concurrent Append: %v", err)
	}
	if len(seen) != workers*each {
		t.Fatalf("%d distinct offsets for %d appends", len(seen), workers*each)
	}
	recs := readAll(t, st)
	if len(recs) != workers*each {
		t.Fatalf("read %d records, want %d", len(recs), workers*each)
	}
	for _, rec := range recs {
		if a, ok := seen[rec.PhysicalOffset]; !ok || a.Size != rec.TotalSize {
			t.Fatalf("record at %d does not match an append result", rec.PhysicalOffset)
		}
	}
}

func testRestart(t *testing.T, open Factory) {
	dir := t.TempDir()
	st := openStore(t, open, dir)
	seg := st.Bounds().SegmentSize
	r := rand.New(rand.NewPCG(16, 17))
	var msgs []*record.Message
	var res []store.AppendResult
	for i := 0; st.Bounds().Max < seg+seg/2; i++ {
		m, a := appendN(t, st, r, i, 1)
		msgs, res = append(msgs, m...), append(res, a...)
	}
	before := st.Bounds()
	closeStore(t, st)

	st = openStore(t, open, dir)
	defer closeStore(t, st)
	after := st.Bounds()
	if after.Min != before.Min || after.Max != before.Max || after.LastSegmentStart != before.LastSegmentStart {
		t.Fatalf("bounds after a restart %+v, before %+v", after, before)
	}
	if after.Flushed < before.Max {
		t.Fatalf("after Close and reopen only %d of %d is flushed", after.Flushed, before.Max)
	}
	recs := readAll(t, st)
	if len(recs) != len(msgs) {
		t.Fatalf("%d records after a restart, want %d", len(recs), len(msgs))
	}
	for i := range recs {
		sameMessage(t, i, recs[i].Message, msgs[i])
	}
	// Appends continue after the last record, queue offsets too.
	m := message(r, 0) // Topic0, queue 0
	a, err := st.Append(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	if a.Offset < before.Max {
		t.Fatalf("append after a restart at %d, below the old max %d", a.Offset, before.Max)
	}
	var want int64
	for i, pm := range msgs {
		if pm.Topic == m.Topic && pm.QueueID == m.QueueID {
			want = res[i].QueueOffset + 1
		}
	}
	if a.QueueOffset != want {
		t.Fatalf("queue offset after a restart %d, want %d", a.QueueOffset, want)
	}
}

// testReplicaRestart: a replica written with AppendAt reopens with the
// same bounds, bytes and records. A store that writes AppendAt's
// bytes at the file's end instead of their offset, or that counts bytes
// past its max offset as part of the log, fails here.
func testReplicaRestart(t *testing.T, open Factory) {
	src := openStore(t, open, t.TempDir())
	defer closeStore(t, src)
	seg := src.Bounds().SegmentSize
	r := rand.New(rand.NewPCG(21, 22))
	var msgs []*record.Message
	for i := 0; src.Bounds().Max < seg+seg/2; i++ {
		m, _ := appendN(t, src, r, i, 1)
		msgs = append(msgs, m...)
	}
	max := src.Bounds().Max
	dir := t.TempDir()
	dst := openStore(t, open, dir)
	replicate(t, src, dst, 0, max, 5000)
	before := dst.Bounds()
	closeStore(t, dst)

	dst = openStore(t, open, dir)
	defer closeStore(t, dst)
	after := dst.Bounds()
	if after.Min != before.Min || after.Max != max || after.LastSegmentStart != before.LastSegmentStart {
		t.Fatalf("replica bounds after a restart %+v, before %+v (max %d)", after, before, max)
	}
	if !bytes.Equal(readBytes(t, dst, 0, max, 8192), readBytes(t, src, 0, max, 8192)) {
		t.Fatal("replica bytes differ from the source after a restart")
	}
	recs := readAll(t, dst)
	if len(recs) != len(msgs) {
		t.Fatalf("replica has %d records after a restart, want %d", len(recs), len(msgs))
	}
	for i := range recs {
		sameMessage(t, i, recs[i].Message, msgs[i])
	}
	// It goes on where it stopped.
	more := make([]byte, 100)
	if _, err := dst.AppendAt(max, more); err != nil {
		t.Fatalf("AppendAt after a restart: %v", err)
	}
}

// testReplicaQueueOffsets: a log written with AppendAt (a replica) knows
// its records' queue offsets: Append continues each queue where the copied
// records left it (a promoted slave relies on it).
func testReplicaQueueOffsets(t *testing.T, open Factory) {
	src := openStore(t, open, t.TempDir())
	defer closeStore(t, src)
	r := rand.New(rand.NewPCG(23, 24))
	var msgs []*record.Message
	var res []store.AppendResult
	for i := range 40 {
		m, a := appendN(t, src, r, i, 1)
		msgs, res = append(msgs, m...), append(res, a...)
	}
	max := src.Bounds().Max
	dst := openStore(t, open, t.TempDir())
	defer closeStore(t, dst)
	replicate(t, src, dst, 0, max, 3000)
	for _, q := range []int{0, 1} {
		m := message(r, q)
		var want int64
		for i, pm := range msgs {
			if pm.Topic == m.Topic && pm.QueueID == m.QueueID {
				want = res[i].QueueOffset + 1
			}
		}
		a, err := dst.Append(context.Background(), m)
		if err != nil {
			t.Fatal(err)
		}
		if a.Offset != max || a.QueueOffset != want {
			t.Fatalf("append after replication: offset %d queue offset %d, want %d and %d", a.Offset, a.QueueOffset, max, want)
		}
		max = a.NextOffset
	}
	recs, _, err := dst.ReadMessages(res[len(res)-1].Offset, 10)
	if err != nil || len(recs) != 3 {
		t.Fatalf("reading the appended records back: %d records, %v", len(recs), err)
	}
}

func testClosed(t *testing.T, open Factory) {
	st := openStore(t, open, t.TempDir())
	appendN(t, st, rand.New(rand.NewPCG(18, 19)), 0, 3)
	closeStore(t, st)
	if _, err := st.Append(context.Background(), message(rand.New(rand.NewPCG(1, 1)), 1)); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Append after Close: %v, want ErrClosed", err)
	}
	if _, err := st.AppendAt(0, []byte{1}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("AppendAt after Close: %v, want ErrClosed", err)
	}
	if _, err := st.Read(0, 10); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Read after Close: %v, want ErrClosed", err)
	}
	if _, _, err := st.ReadMessages(0, 1); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("ReadMessages after Close: %v, want ErrClosed", err)
	}
	if err := st.Truncate(0); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Truncate after Close: %v, want ErrClosed", err)
	}
	if err := st.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
		t.Fatalf("second Close: %v, want nil or ErrClosed", err)
	}
}
