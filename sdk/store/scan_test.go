package store_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/sdk/store/memstore"
)

const scanSeg = 4 << 10

// scanLog is a master log of n messages of growing size over several
// 4 KiB segments (so with fillers), and the results of its appends.
func scanLog(t *testing.T, n int) (*memstore.Store, []store.AppendResult) {
	t.Helper()
	st := memstore.New(scanSeg)
	t.Cleanup(func() { st.Close() })
	var res []store.AppendResult
	for i := range n {
		r, err := st.Append(context.Background(), &record.Message{Topic: "TopicScan", Body: bytes.Repeat([]byte{'s'}, 50+i*37)})
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, r)
	}
	return st, res
}

// rawBytes copies the stored bytes [from, to).
func rawBytes(t *testing.T, l store.Log, from, to int64) []byte {
	t.Helper()
	var out []byte
	for off := from; off < to; {
		v, err := l.Read(off, int(to-off))
		if err != nil || len(v.Data) == 0 {
			t.Fatalf("read at %d: %d bytes, %v", off, len(v.Data), err)
		}
		out = append(out, v.Data...)
		off += int64(len(v.Data))
		v.Release()
	}
	return out
}

// copyLog is a new log holding src's bytes [0, to), with edit applied to
// each piece (a piece never crosses a segment end) before it is appended.
func copyLog(t *testing.T, src store.Log, to int64, edit func(off int64, b []byte)) *memstore.Store {
	t.Helper()
	dst := memstore.New(scanSeg)
	t.Cleanup(func() { dst.Close() })
	for off := int64(0); off < to; {
		n := min(to-off, scanSeg-off%scanSeg)
		b := rawBytes(t, src, off, off+n)
		if edit != nil {
			edit(off, b)
		}
		if _, err := dst.AppendAt(off, b); err != nil {
			t.Fatal(err)
		}
		off += n
	}
	return dst
}

// shortReads hands out views of at most 7 bytes, as a log reading over a
// stream may: ScanRecords must piece records together.
type shortReads struct{ store.Log }

func (s shortReads) Read(offset int64, max int) (store.View, error) {
	return s.Log.Read(offset, min(max, 7))
}

func TestScanRecords(t *testing.T) {
	st, res := scanLog(t, 60)
	b := st.Bounds()
	if b.LastSegmentStart < 3*scanSeg {
		t.Fatalf("the log fills %d segments, want at least 4", b.LastSegmentStart/scanSeg+1)
	}
	for _, l := range []struct {
		name string
		log  store.Log
	}{{"views", st}, {"short views", shortReads{st}}} {
		t.Run(l.name, func(t *testing.T) {
			// From every record boundary to the end, and to inside every record.
			for i, r := range res {
				end, n, err := store.ScanRecords(l.log, r.Offset, b.Max)
				if err != nil || end != b.Max || n != len(res)-i {
					t.Fatalf("ScanRecords(%d, max %d) = %d, %d records, %v; want %d, %d", r.Offset, b.Max, end, n, err, b.Max, len(res)-i)
				}
				end, n, err = store.ScanRecords(l.log, 0, r.NextOffset-1)
				if err != nil || end != r.Offset || n != i {
					t.Fatalf("ScanRecords(0, %d) = %d, %d records, %v; want %d, %d", r.NextOffset-1, end, n, err, r.Offset, i)
				}
				end, n, err = store.ScanRecords(l.log, r.Offset, r.Offset)
				if err != nil || end != r.Offset || n != 0 {
					t.Fatalf("ScanRecords(%d, %d) = %d, %d records, %v; want no move", r.Offset, r.Offset, end, n, err)
				}
			}
			// The same count as the message view.
			recs, _, err := st.ReadMessages(0, len(res)+1)
			if err != nil || len(recs) != len(res) {
				t.Fatalf("ReadMessages: %d records, %v", len(recs), err)
			}
			if end, n, err := store.ScanRecords(l.log, b.Max, b.Max+100); err != nil || end != b.Max || n != 0 {
				t.Fatalf("ScanRecords at the max offset = %d, %d, %v", end, n, err)
			}
		})
	}
}

func TestScanRecordsPartialTail(t *testing.T) {
	src, res := scanLog(t, 40)
	for _, k := range []int{5, 17, 33} {
		r := res[k]
		for _, cut := range []int64{r.Offset + 3, r.Offset + 8, r.Offset + int64(r.Size) - 1} {
			dst := copyLog(t, src, cut, nil)
			for _, l := range []store.Log{dst, shortReads{dst}} {
				end, n, err := store.ScanRecords(l, 0, cut)
				if err != nil || end != r.Offset || n != k {
					t.Fatalf("log ending at %d inside record %d: ScanRecords = %d, %d records, %v; want %d, %d", cut, k, end, n, err, r.Offset, k)
				}
			}
		}
	}
	// A log ending inside a segment's filler stops before the filler.
	for i := 1; i < len(res); i++ {
		if res[i].Offset%scanSeg != 0 || res[i-1].NextOffset == res[i].Offset {
			continue
		}
		dst := copyLog(t, src, res[i].Offset-2, nil)
		if end, _, err := store.ScanRecords(dst, 0, res[i].Offset); err != nil || end != res[i-1].NextOffset {
			t.Fatalf("log ending inside the filler at %d: ScanRecords = %d, %v; want %d", res[i-1].NextOffset, end, err, res[i-1].NextOffset)
		}
		return
	}
	t.Fatal("no filler in the log")
}

func TestScanRecordsErrors(t *testing.T) {
	src, res := scanLog(t, 30)
	b := src.Bounds()
	if _, _, err := store.ScanRecords(src, b.Max+1, b.Max+10); !errors.Is(err, store.ErrOffsetOutOfRange) {
		t.Fatalf("past the max offset: %v, want ErrOffsetOutOfRange", err)
	}
	if _, _, err := store.ScanRecords(src, res[3].Offset+5, b.Max); !errors.Is(err, store.ErrNotBoundary) {
		t.Fatalf("inside a record: %v, want ErrNotBoundary", err)
	}
	// A flipped body byte in record 7: a checksum error there, after 7 records.
	bad := copyLog(t, src, b.Max, func(off int64, p []byte) {
		if at := res[7].NextOffset - 20; at >= off && at < off+int64(len(p)) {
			p[at-off] ^= 0xff
		}
	})
	end, n, err := store.ScanRecords(bad, 0, b.Max)
	if !errors.Is(err, store.ErrCorrupt) || !errors.Is(err, record.ErrChecksum) || end != res[7].Offset || n != 7 {
		t.Fatalf("corrupt record 7: %d, %d records, %v; want ErrCorrupt (checksum) at %d after 7", end, n, err, res[7].Offset)
	}
	if _, _, err := store.ScanRecords(bad, res[7].Offset, b.Max); !errors.Is(err, store.ErrNotBoundary) {
		t.Fatalf("from the corrupt record: %v, want ErrNotBoundary", err)
	}
	// A filler whose size is not what its segment has left.
	for i := 1; i < len(res); i++ {
		fill := res[i-1].NextOffset
		if res[i].Offset%scanSeg != 0 || fill == res[i].Offset {
			continue
		}
		bad := copyLog(t, src, b.Max, func(off int64, p []byte) {
			if fill >= off && fill < off+int64(len(p)) {
				p[fill-off+3]++
			}
		})
		if _, _, err := store.ScanRecords(bad, 0, b.Max); !errors.Is(err, store.ErrCorrupt) || !errors.Is(err, record.ErrBadLength) {
			t.Fatalf("filler of the wrong size: %v, want ErrCorrupt (bad length)", err)
		}
		break
	}
	// A PHYSICALOFFSET that is not the record's offset: bytes moved by one segment.
	moved := memstore.New(scanSeg)
	defer moved.Close()
	if _, err := moved.AppendAt(scanSeg, rawBytes(t, src, 0, res[1].NextOffset)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.ScanRecords(moved, scanSeg, 2*scanSeg); !errors.Is(err, store.ErrNotBoundary) || !errors.Is(err, record.ErrBadLength) {
		t.Fatalf("records at the wrong offset: %v, want ErrNotBoundary (bad length)", err)
	}
	// Zeros where a record should start: a bad magic code.
	zeros := memstore.New(scanSeg)
	defer zeros.Close()
	if _, err := zeros.AppendAt(0, make([]byte, 200)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.ScanRecords(zeros, 0, 0); !errors.Is(err, store.ErrNotBoundary) || !errors.Is(err, record.ErrBadMagic) {
		t.Fatalf("zeros: %v, want ErrNotBoundary (bad magic)", err)
	}
}

// TestScanRecordsShortTail: a segment whose last record leaves fewer bytes
// than a filler (zeros, never a record) continues at the next segment.
func TestScanRecordsShortTail(t *testing.T) {
	st := memstore.New(scanSeg)
	defer st.Close()
	put := func(off int64, size int) int64 {
		t.Helper()
		empty, err := record.Size(&record.Message{Topic: "T"})
		if err != nil {
			t.Fatal(err)
		}
		b, err := record.Encode(nil, &record.Message{Topic: "T", Body: make([]byte, size-empty)}, 0, off, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AppendAt(off, b); err != nil {
			t.Fatal(err)
		}
		return off + int64(size)
	}
	off := put(0, scanSeg-5)
	if _, err := st.AppendAt(off, make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	next := put(scanSeg, 300)
	if end, n, err := store.ScanRecords(st, 0, next); err != nil || end != next || n != 2 {
		t.Fatalf("ScanRecords over a 5-byte segment tail = %d, %d records, %v; want %d, 2", end, n, err, next)
	}
	if end, n, err := store.ScanRecords(st, 0, scanSeg-1); err != nil || end != off || n != 1 {
		t.Fatalf("ScanRecords to inside the tail = %d, %d records, %v; want %d, 1", end, n, err, off)
	}
}

func TestBoundsSegmentStart(t *testing.T) {
	b := store.Bounds{Min: 100, LastSegmentStart: 3000, SegmentSize: 1000}
	for off, want := range map[int64]int64{3000: 3000, 3999: 3000, 4000: 4000, 2999: 2000, 2000: 2000, 150: 0, 0: 0} {
		if got := b.SegmentStart(off); got != want {
			t.Errorf("SegmentStart(%d) = %d, want %d", off, got, want)
		}
	}
	if got := (store.Bounds{Min: 7}).SegmentStart(99); got != 7 {
		t.Errorf("without a segment size: %d, want Min", got)
	}
}
