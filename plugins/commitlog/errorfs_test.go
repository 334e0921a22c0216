package commitlog

import (
	"bytes"
	"context"
	"errors"
	"math/rand"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/replicatorhq/replicator/plugins/commitlog/vfs"
	"github.com/replicatorhq/replicator/plugins/commitlog/vfs/errorfs"
	"github.com/replicatorhq/replicator/sdk/store"
)

// faultyOptions are testOptions whose file system injects errors once a
// test sets an injector.
func faultyOptions(t testing.TB, segSize int64) (Options, *errorfs.FS) {
	o := testOptions(t, segSize)
	fsys := errorfs.Wrap(vfs.Default, nil)
	o.FS = fsys
	return o, fsys
}

// TestFaultSyncFailsSyncFlushAppend: an injected msync error fails a
// SYNC_FLUSH Append with an error wrapping it (not a flush timeout), and
// a reopened log holds the record.
func TestFaultSyncFailsSyncFlushAppend(t *testing.T) {
	dir := t.TempDir()
	o, f := faultyOptions(t, 64<<10)
	o.FlushMode = FlushSync
	l := mustOpen(t, dir, o)
	if _, err := l.Append(context.Background(), testMsg("T", 0, 100, 1)); err != nil {
		t.Fatal(err)
	}
	f.SetInjector(errorfs.Always(syscall.EIO, errorfs.Kinds(errorfs.OpSync)))
	res, err := l.Append(context.Background(), testMsg("T", 0, 100, 2))
	if !errors.Is(err, syscall.EIO) || errors.Is(err, store.ErrFlushDiskTimeout) || !strings.Contains(err.Error(), "sync") {
		t.Fatalf("Append with a failing msync: %v", err)
	}
	if f.Injected() == 0 {
		t.Fatal("nothing injected")
	}
	f.SetInjector(nil)
	mustClose(t, l)
	l = mustOpen(t, dir, testOptions(t, 64<<10))
	defer mustClose(t, l)
	if b := l.Bounds(); b.Max != res.NextOffset {
		t.Fatalf("reopened max %d, want %d", b.Max, res.NextOffset)
	}
}

// TestFaultCreateFailsRoll: an injected segment-creation error fails the
// Append that needs the next segment, nothing past the segment end is
// stored, and appends work again once the fault clears.
func TestFaultCreateFailsRoll(t *testing.T) {
	dir := t.TempDir()
	o, f := faultyOptions(t, 16<<10)
	o.Preallocate = false // no spare segment made before the fault
	l := mustOpen(t, dir, o)
	defer mustClose(t, l)
	if _, err := l.Append(context.Background(), testMsg("T", 0, 100, 1)); err != nil {
		t.Fatal(err)
	}
	f.SetInjector(errorfs.Always(syscall.ENOSPC, errorfs.And(errorfs.Kinds(errorfs.OpCreate), errorfs.InDir(filepath.Join(dir, allocDirName)))))
	var err error
	for i := int64(2); err == nil; i++ {
		_, err = l.Append(context.Background(), testMsg("T", 0, 1000, i))
		if l.Bounds().Max > 16<<10 {
			t.Fatalf("appended past the first segment while creation fails: max %d", l.Bounds().Max)
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Append needing a new segment: %v", err)
	}
	f.SetInjector(nil)
	if _, err := l.Append(context.Background(), testMsg("T", 0, 1000, 99)); err != nil {
		t.Fatalf("Append after the fault cleared: %v", err)
	}
	if l.Bounds().Max <= 16<<10 {
		t.Fatal("no new segment after the fault cleared")
	}
}

// TestFaultWriteFailsReplicatedAppend: an injected write error (EIO) fails
// AppendAt and AppendAtFrom, including in the middle of a multi-chunk
// AppendAtFrom; the log is unchanged (max, bytes past it still zero) and
// the same append succeeds once the fault clears, byte-identical to the
// master.
func TestFaultWriteFailsReplicatedAppend(t *testing.T) {
	const seg = 4 << 20
	r := rand.New(rand.NewSource(5))
	master := mustOpen(t, t.TempDir(), testOptions(t, seg))
	defer mustClose(t, master)
	for master.Bounds().Max < 3*fillChunk {
		mustAppend(t, master, testMsg("T", 0, 4000, r.Int63()))
	}
	o, f := faultyOptions(t, seg)
	l := mustOpen(t, t.TempDir(), o)
	defer mustClose(t, l)
	replicateFrom(t, master, l, 100_000, r, 8000)
	at := l.Bounds().Max
	v, err := master.Read(at, 2*fillChunk+5000) // three chunks for AppendAtFrom
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Clone(v.Data)
	v.Release()

	// The second write fails: AppendAtFrom's second chunk.
	f.SetInjector(errorfs.OnIndex(2, syscall.EIO, errorfs.Kinds(errorfs.OpWrite)))
	unchanged := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("%s with a failing write: %v, want EIO", what, err)
		}
		if mx := l.Bounds().Max; mx != at {
			t.Fatalf("%s: max %d after a failed write, want %d", what, mx, at)
		}
		s, _ := segmentFor(l.segList(), at)
		if tail := s.data[at-s.start : min(s.size, at-s.start+int64(len(data)))]; bytes.Count(tail, []byte{0}) != len(tail) {
			t.Fatalf("%s: bytes past the max offset are not zero after a failed write", what)
		}
	}
	_, err = l.AppendAtFrom(at, len(data), bytes.NewReader(data))
	unchanged("AppendAtFrom", err)
	f.SetInjector(errorfs.OnIndex(1, syscall.EIO, errorfs.Kinds(errorfs.OpWrite)))
	_, err = l.AppendAt(at, data[:1000])
	unchanged("AppendAt", err)
	// A torn write: part of the bytes reach the file, then EIO.
	f.SetInjector(errorfs.OnIndex(2, errorfs.Torn(fillChunk/3, syscall.EIO), errorfs.Kinds(errorfs.OpWrite)))
	_, err = l.AppendAtFrom(at, len(data), bytes.NewReader(data))
	unchanged("AppendAtFrom with a torn write", err)
	f.SetInjector(errorfs.OnIndex(1, errorfs.Torn(700, syscall.EIO), errorfs.Kinds(errorfs.OpWrite)))
	_, err = l.AppendAt(at, data[:1000])
	unchanged("AppendAt with a torn write", err)

	f.SetInjector(nil)
	if next, err := l.AppendAtFrom(at, len(data), bytes.NewReader(data)); err != nil || next != at+int64(len(data)) {
		t.Fatalf("AppendAtFrom after the fault cleared: %d, %v", next, err)
	}
	sameBytes(t, master, l, 0, l.Bounds().Max)
}
