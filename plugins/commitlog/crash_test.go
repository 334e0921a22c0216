package commitlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/replicatorhq/replicator/plugins/commitlog/vfs/errorfs"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// crashImage builds a log whose checkpoint covers every record but the
// last, appends the last one (not flushed: what a crash can tear), and
// returns a copy of the directory taken while the log is open.
func crashImage(t *testing.T, seg int64, fillFirst bool) (img string, lastOff int64, lastSize int, prefix int) {
	o := testOptions(t, seg)
	o.Preallocate = false
	l := mustOpen(t, t.TempDir(), o)
	n := 0
	for l.Bounds().Max < seg+seg/2 {
		mustAppend(t, l, testMsg("T", int32(n%2), 150, int64(n)))
		n++
	}
	if fillFirst { // leave less room than the last record needs: it opens a new segment
		overhead := int64(len(mustEncode(t, testMsg("T", 0, 0, int64(n)))))
		for {
			rest := seg - l.Bounds().Max%seg
			if rest < 100 {
				break
			}
			body := int64(150)
			if overhead+body+record.FillerSize > rest-100 {
				body = rest - 50 - overhead
			}
			mustAppend(t, l, testMsg("T", 0, int(body), int64(n)))
			n++
		}
	}
	if err := l.checkpointNow(false); err != nil {
		t.Fatal(err)
	}
	res, err := l.Append(context.Background(), testMsg("T", 1, 100, 999))
	if err != nil {
		t.Fatal(err)
	}
	img = copyDir(t, l.root)
	mustClose(t, l)
	return img, res.Offset, int(res.Size), n
}

// TestCommitLogCrashTail cuts (zeroes from byte i) or garbles (flips byte
// i of) the last record for every i and reopens: the log must recover to
// exactly the records before it, then accept appends and reopen cleanly.
func TestCommitLogCrashTail(t *testing.T) {
	const seg = 4096
	for _, fillFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("first_in_segment=%v", fillFirst), func(t *testing.T) {
			imgDir, lastOff, lastSize, prefix := crashImage(t, seg, fillFirst)
			img := snapshot(t, imgDir)
			if fillFirst != (lastOff%seg == 0) {
				t.Fatalf("last record at %d", lastOff)
			}
			o := testOptions(t, seg)
			o.Preallocate = false
			const shards = 4 // fsync-bound: shards overlap their waits
			for _, mode := range []string{"cut", "garble"} {
				for shard := 0; shard < shards; shard++ {
					t.Run(fmt.Sprintf("%s/%d", mode, shard), func(t *testing.T) {
						t.Parallel()
						dir := t.TempDir()
						for i := shard; i < lastSize; i += shards {
							img.restore(t, dir)
							patchSegment(t, dir, seg, lastOff, func(b []byte, pos int64) {
								if mode == "cut" {
									clear(b[pos+int64(i) : pos+int64(lastSize)])
								} else {
									b[pos+int64(i)] ^= 0x5A
								}
							})
							l, err := Open(dir, o)
							if err != nil {
								t.Fatalf("%s at byte %d: %v", mode, i, err)
							}
							// Only BODYCRC, the lengths, MAGICCODE and PHYSICALOFFSET
							// protect a record: damage elsewhere (queue, flags, times,
							// hosts, topic, properties) verifies, as in RocketMQ.
							mustDrop := protected(mode, i, lastSize, 100)
							got := l.Bounds().Max
							if got != lastOff && (mustDrop || got != lastOff+int64(lastSize)) {
								t.Fatalf("%s at byte %d: max %d, want %d", mode, i, got, lastOff)
							}
							recs := readAll(t, l)
							if len(recs) != prefix+int(got-lastOff)/lastSize {
								t.Fatalf("%s at byte %d: %d records", mode, i, len(recs))
							}
							if got != lastOff {
								if want := testMsg("T", 1, 100, 999).Body; !bytes.Equal(recs[prefix].Body, want) {
									t.Fatalf("%s at byte %d: kept a record with a different body", mode, i)
								}
								mustClose(t, l)
								continue
							}
							if i%37 == 0 { // the recovered log keeps working
								res, err := l.Append(context.Background(), testMsg("T", 1, 30, 5))
								q1 := int64(0)
								for _, r := range recs {
									if r.QueueID == 1 {
										q1++
									}
								}
								if err != nil || res.Offset != lastOff || res.QueueOffset != q1 {
									t.Fatalf("append after recovery: %+v, %v", res, err)
								}
								mustClose(t, l)
								l = mustOpen(t, dir, o)
								if recs := readAll(t, l); len(recs) != prefix+1 {
									t.Fatalf("after append and reopen: %d records", len(recs))
								}
							}
							mustClose(t, l)
						}
					})
				}
			}
		})
	}
}

func TestCommitLogCorruptMiddle(t *testing.T) {
	const seg = 4096
	o := testOptions(t, seg)
	o.Preallocate = false
	base := t.TempDir()
	l := mustOpen(t, base, o)
	var offs []int64
	for l.Bounds().LastSegmentStart < 6*seg {
		offs = append(offs, mustAppend(t, l, testMsg("T", 0, 200, int64(len(offs)))))
	}
	mustClose(t, l)
	recIn := func(segIdx int64) int64 {
		for _, off := range offs {
			if off/seg == segIdx && off%seg > 0 {
				return off
			}
		}
		t.Fatal("no record")
		return 0
	}
	cases := []struct {
		name   string
		mutate func(dir string)
		substr string
	}{
		{"body flipped in the 3rd-last segment", func(dir string) {
			off := recIn(4)
			patchSegment(t, dir, seg, off, func(b []byte, pos int64) { b[pos+120] ^= 1 })
		}, fmt.Sprintf("%s at offset %d", store.SegmentName(4*seg), recIn(4))},
		{"header garbled in the first segment, no checkpoint", func(dir string) {
			os.Remove(filepath.Join(dir, checkpointName))
			off := recIn(0)
			patchSegment(t, dir, seg, off, func(b []byte, pos int64) { b[pos+5] ^= 1 })
		}, fmt.Sprintf("%s at offset %d", store.SegmentName(0), recIn(0))},
		{"record zeroed below the flushed offset", func(dir string) {
			off := recIn(5)
			patchSegment(t, dir, seg, off, func(b []byte, pos int64) { clear(b[pos:]) })
		}, "does not verify"},
		{"garbage before a segment with data, no checkpoint", func(dir string) {
			os.Remove(filepath.Join(dir, checkpointName))
			off := recIn(5)
			patchSegment(t, dir, seg, off, func(b []byte, pos int64) { b[pos+100] ^= 1 })
		}, "after it holds data"},
		{"segment of the wrong size", func(dir string) {
			os.Truncate(segmentPath(filepath.Join(dir, "commitlog"), 2*seg), seg-1)
		}, "bytes, segments are"},
		{"missing segment", func(dir string) {
			os.Remove(segmentPath(filepath.Join(dir, "commitlog"), 2*seg))
		}, "must be consecutive"},
		{"bad segment name", func(dir string) {
			os.WriteFile(filepath.Join(dir, "commitlog", "123"), make([]byte, seg), 0o644)
		}, "not 20 digits"},
		{"unaligned segment name", func(dir string) {
			cl := filepath.Join(dir, "commitlog")
			for i := int64(0); i <= 6; i++ {
				os.Rename(segmentPath(cl, i*seg), segmentPath(cl, i*seg+1))
			}
		}, "not a multiple"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, base)
			tc.mutate(dir)
			l, err := Open(dir, o)
			if err == nil {
				l.Close()
				t.Fatal("opened a corrupt log")
			}
			if !IsCorrupt(err) || !strings.Contains(err.Error(), tc.substr) {
				t.Fatalf("error %q: IsCorrupt %v, want it to contain %q", err, IsCorrupt(err), tc.substr)
			}
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.File == "" {
				t.Fatalf("no CorruptError with a file: %v", err)
			}
		})
	}
	t.Run("zero-length last file is deleted", func(t *testing.T) {
		dir := copyDir(t, base)
		path := segmentPath(filepath.Join(dir, "commitlog"), 7*seg)
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		l := mustOpen(t, dir, o)
		defer mustClose(t, l)
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("zero-length last file kept: %v", err)
		}
		if len(readAll(t, l)) != len(offs) {
			t.Fatal("records lost")
		}
	})
}

// TestCommitLogTruncateCrash simulates a crash after each step of
// Truncate and checks that recovery gives the old log or the cut one, and
// that appends after the cut never bring cut records back (RocketMQ
// #10666).
func TestCommitLogTruncateCrash(t *testing.T) {
	const seg = 4096
	o := testOptions(t, seg)
	o.Preallocate = false
	base := t.TempDir()
	l := mustOpen(t, base, o)
	var offs []int64
	for l.Bounds().LastSegmentStart < 4*seg {
		offs = append(offs, mustAppend(t, l, testMsg("T", 0, 250, int64(len(offs)))))
	}
	all := len(offs)
	oldMax := l.Bounds().Max
	mustClose(t, l)
	cutIdx := 0
	for i, off := range offs {
		if off > seg+100 {
			cutIdx = i
			break
		}
	}
	cut := offs[cutIdx]
	errCrash := errors.New("crash")
	segRemove := errorfs.And(errorfs.Kinds(errorfs.OpRemove), segmentFile)
	for step := 0; step <= 5; step++ {
		t.Run(fmt.Sprintf("crash after step %d", step), func(t *testing.T) {
			dir := copyDir(t, base)
			fo, fsys := faultyOptions(t, seg)
			fo.Preallocate = false
			l := mustOpen(t, dir, fo)
			// The crash comes at the file-system operation that follows
			// the step: (1) the checkpoint renamed in, before the data
			// directory's fsync; (2) the tail zeroed and msynced, before
			// the first later segment is removed; (3, 4) one later segment
			// removed (and the directory fsynced), before the next.
			var crashAt errorfs.Predicate
			removes := 0
			switch step {
			case 1:
				crashAt = errorfs.And(errorfs.Kinds(errorfs.OpSync), errorfs.PathFunc(func(p string) bool { return p == dir }))
			case 2, 3, 4:
				want := min(step-1, 2)
				crashAt = func(op errorfs.Op) bool {
					if segRemove(op) {
						removes++
						return removes == want
					}
					return false
				}
			}
			var mu sync.Mutex // the flusher's operations reach the injector too
			var img string
			fsys.SetInjector(errorfs.InjectorFunc(func(op errorfs.Op) error {
				mu.Lock()
				defer mu.Unlock()
				if img == "" && crashAt != nil && crashAt(op) {
					img = copyDir(t, dir)
					return errCrash
				}
				return nil
			}))
			err := l.Truncate(cut)
			mu.Lock()
			crashed := img != ""
			mu.Unlock()
			if crashed != (crashAt != nil) {
				t.Fatalf("crashed %v: the crash point of step %d was not met once", crashed, step)
			}
			if !crashed { // ran to completion: crash after the call, before anything else
				if err != nil {
					t.Fatal(err)
				}
				if step == 5 { // append a short record first: the #10666 case
					mustAppend(t, l, testMsg("T", 0, 10, 1))
				}
				img = copyDir(t, dir)
			} else if !errors.Is(err, errCrash) {
				t.Fatalf("Truncate: %v", err)
			}
			fsys.SetInjector(nil)
			l.Close()
			r := mustOpen(t, img, o)
			defer mustClose(t, r)
			recs := readAll(t, r)
			mx := r.Bounds().Max
			switch {
			case step == 5:
				if len(recs) != cutIdx+1 {
					t.Fatalf("%d records after cut + append, want %d (cut records resurrected?)", len(recs), cutIdx+1)
				}
			case mx == oldMax && len(recs) == all && step <= 1:
			case mx == cut && len(recs) == cutIdx:
			default:
				t.Fatalf("recovered max %d with %d records: neither the old log (%d, %d) nor the cut one (%d, %d)", mx, len(recs), oldMax, all, cut, cutIdx)
			}
			if step >= 2 && step <= 4 && mx != cut {
				t.Fatalf("step %d: max %d, want %d", step, mx, cut)
			}
		})
	}
}

// protected reports whether damage at byte i of an unflushed record (cut:
// zeroing from i to its end; garble: flipping byte i) must make recovery
// drop it: a cut always zeroes the last byte (torn); a flip must hit
// TOTALSIZE, MAGICCODE, BODYCRC, PHYSICALOFFSET, a port, the body length,
// body, topic length or properties length.
func protected(mode string, i, size, bodyLen int) bool {
	topicLenAt := 88 + bodyLen
	propsLenAt := topicLenAt + 1 + 1 // topic "T"
	if mode == "cut" {
		return true // the last byte becomes zero: torn (see tornTail)
	}
	switch {
	case i < 12, i >= 28 && i < 36, i >= 84 && i <= topicLenAt, i == 52, i == 53, i == 68, i == 69:
		return true
	case i == propsLenAt || i == propsLenAt+1:
		return true
	}
	return false
}
