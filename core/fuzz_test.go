package core

import (
	"testing"

	"github.com/replicatorhq/replicator/sdk/record"
)

// FuzzFirstRecord: the classic slave's check of the first bytes of a
// connection never panics, and accepts a real record at its own offset.
func FuzzFirstRecord(f *testing.F) {
	rec, err := record.Encode(nil, testMsg(20), 0, 4096, 1)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(rec, int64(4096), int64(1<<20))
	f.Add(rec[:12], int64(4096), int64(1<<20))
	f.Add([]byte{0, 0, 0, 10, 0xCA, 0xFE, 0xBA, 0xBE}, int64(0), int64(1<<20))
	f.Fuzz(func(t *testing.T, body []byte, off, segSize int64) {
		if off < 0 || segSize < 0 {
			return
		}
		_ = firstRecordError(body, off, segSize)
	})
}

func TestFirstRecordAcceptsRecords(t *testing.T) {
	rec, err := record.Encode(nil, testMsg(20), 0, 4096, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := firstRecordError(rec, 4096, 1<<20); err != nil {
		t.Fatalf("a whole record: %v", err)
	}
	if err := firstRecordError(rec[:40], 4096, 1<<20); err != nil {
		t.Fatalf("the start of a record: %v", err)
	}
	if err := firstRecordError(rec, 8192, 1<<20); err == nil {
		t.Fatal("a record with another PHYSICALOFFSET accepted")
	}
	if err := firstRecordError(rec[7:], 4096, 1<<20); err == nil {
		t.Fatal("bytes from the middle of a record accepted")
	}
	if err := firstRecordError(rec[:40], (1<<20)-50, 1<<20); err == nil {
		t.Fatal("a record that does not fit in the segment accepted")
	}
}
