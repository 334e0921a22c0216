package commitlog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/replicatorhq/replicator/sdk/record"
)

var (
	fuzzBaseOnce sync.Once
	fuzzBase     dirImage
)

const fuzzSeg = 4096

// fuzzImage is a log of three segments of records, built once.
func fuzzImage(t *testing.T) dirImage {
	fuzzBaseOnce.Do(func() {
		dir, err := os.MkdirTemp("", "commitlog-fuzz")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		o := testOptions(t, fuzzSeg)
		o.Preallocate = false
		l := mustOpen(t, dir, o)
		for i := 0; l.Bounds().Max < 2*fuzzSeg+1000; i++ {
			mustAppend(t, l, testMsg("T", int32(i%2), 100+i*37%400, int64(i)))
		}
		mustClose(t, l)
		fuzzBase = snapshot(t, dir)
	})
	return fuzzBase
}

// FuzzRecovery writes random bytes into a segment of a valid log (with or
// without its checkpoint) and opens it: recovery never panics; it either
// refuses with a corruption error or yields a log whose every record
// verifies, which then takes an append and reopens to the same state.
func FuzzRecovery(f *testing.F) {
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, uint16(2*fuzzSeg+500), true)
	f.Add([]byte{0, 0, 0, 0x40, 0xCB, 0xD4, 0x31, 0x94}, uint16(fuzzSeg+100), false)
	f.Add([]byte{0, 0, 0, 91, 0xDA, 0xA3, 0x20, 0xA7}, uint16(2*fuzzSeg+900), true)
	f.Add(make([]byte, 300), uint16(10), false)
	f.Fuzz(func(t *testing.T, data []byte, at uint16, keepCheckpoint bool) {
		img := fuzzImage(t)
		dir := t.TempDir()
		img.restore(t, dir)
		if !keepCheckpoint {
			os.Remove(filepath.Join(dir, checkpointName))
		}
		off := int64(at) % (3 * fuzzSeg)
		patchSegment(t, dir, fuzzSeg, off, func(b []byte, pos int64) { copy(b[pos:], data) })
		o := testOptions(t, fuzzSeg)
		o.Preallocate = false
		l, err := Open(dir, o)
		if err != nil {
			if !IsCorrupt(err) {
				t.Fatalf("Open failed without a corruption mark: %v", err)
			}
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.File == "" {
				t.Fatalf("corruption error names no file: %v", err)
			}
			return
		}
		recs := readAll(t, l)
		b := l.Bounds()
		res, err := l.Append(context.Background(), &record.Message{Topic: "T", Body: []byte("x")})
		if err != nil || res.Offset < b.Max {
			t.Fatalf("Append after recovery: %+v, %v", res, err)
		}
		mustClose(t, l)
		l = mustOpen(t, dir, o)
		defer mustClose(t, l)
		if again := readAll(t, l); len(again) != len(recs)+1 {
			t.Fatalf("reopen: %d records, want %d", len(again), len(recs)+1)
		}
	})
}
