package storetest

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/replicatorhq/replicator/sdk/store"
)

// testScanRecords: store.ScanRecords, the record boundaries core finds
// over the byte log alone (Read views), agrees with what the store
// appended, on a master's log and on a replica that holds its bytes up to
// the middle of a record.
func testScanRecords(t *testing.T, open Factory) {
	src := openStore(t, open, t.TempDir())
	defer closeStore(t, src)
	seg := src.Bounds().SegmentSize
	r := rand.New(rand.NewPCG(11, 12))
	var res []store.AppendResult
	for i := 0; src.Bounds().Max < 2*seg+seg/2; i++ {
		_, rs := appendN(t, src, r, i, 1)
		res = append(res, rs...)
	}
	b := src.Bounds()
	end, n, err := store.ScanRecords(src, b.Min, b.Max)
	if err != nil || end != b.Max || n != len(res) {
		t.Fatalf("ScanRecords over the log = %d, %d records, %v; want %d, %d", end, n, err, b.Max, len(res))
	}
	for _, i := range []int{0, 1, len(res) / 2, len(res) - 1} {
		x := res[i]
		if end, n, err := store.ScanRecords(src, x.Offset, x.NextOffset-1); err != nil || end != x.Offset || n != 0 {
			t.Fatalf("ScanRecords(%d, %d), inside record %d = %d, %d, %v; want no move", x.Offset, x.NextOffset-1, i, end, n, err)
		}
		if end, n, err := store.ScanRecords(src, b.Min, x.NextOffset); err != nil || end != x.NextOffset || n != i+1 {
			t.Fatalf("ScanRecords to the end of record %d = %d, %d records, %v; want %d, %d", i, end, n, err, x.NextOffset, i+1)
		}
	}
	if _, _, err := store.ScanRecords(src, res[1].Offset+3, b.Max); !errors.Is(err, store.ErrNotBoundary) {
		t.Fatalf("ScanRecords from inside a record: %v, want ErrNotBoundary", err)
	}
	if _, _, err := store.ScanRecords(src, b.Max+1, b.Max+2); !errors.Is(err, store.ErrOffsetOutOfRange) {
		t.Fatalf("ScanRecords past the max offset: %v, want ErrOffsetOutOfRange", err)
	}
	// A replica whose log ends inside the last record of the second
	// segment: the scan stops at that record's start.
	k := 0
	for i, x := range res {
		if x.Offset < 2*seg {
			k = i
		}
	}
	cut := res[k].Offset + int64(res[k].Size)/2
	dst := openStore(t, open, t.TempDir())
	defer closeStore(t, dst)
	replicate(t, src, dst, 0, cut, 3000)
	end, n, err = store.ScanRecords(dst, seg, cut)
	want := 0
	for _, x := range res[:k] {
		if x.Offset >= seg {
			want++
		}
	}
	if err != nil || end != res[k].Offset || n != want {
		t.Fatalf("replica ending inside record %d: ScanRecords = %d, %d records, %v; want %d, %d", k, end, n, err, res[k].Offset, want)
	}
}
