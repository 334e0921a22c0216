package errorfs_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/plugins/commitlog/vfs"
	"github.com/replicatorhq/replicator/plugins/commitlog/vfs/errorfs"
)

// The example opens a commit log, whose background goroutines Close stops.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestErrorFSNoInjectorPassesThrough(t *testing.T) {
	dir := t.TempDir()
	fsys := errorfs.Wrap(vfs.Default, nil)
	path := filepath.Join(dir, "f")
	if err := vfs.WriteFileSync(fsys, path, []byte("hello"), os.O_EXCL, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := vfs.ReadFile(fsys, path); err != nil || string(b) != "hello" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	if fsys.Injected() != 0 {
		t.Fatalf("injected %d without an injector", fsys.Injected())
	}
	if errorfs.OpSync.String() != "sync" || errorfs.OpKind(99).String() != "OpKind(99)" {
		t.Fatal("OpKind names")
	}
}

// TestErrorFSMapAndMSync: a file opened through the wrapper maps (mmap-go
// on the real file) and msyncs, and an injected msync error names the
// file and wraps both ErrInjected and the cause.
func TestErrorFSMapAndMSync(t *testing.T) {
	fsys := errorfs.Wrap(vfs.Default, nil)
	path := filepath.Join(t.TempDir(), "seg")
	f, err := fsys.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Preallocate(8192); err != nil {
		t.Fatal(err)
	}
	m, err := f.Map(8192)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap()
	copy(m[4096:], "mapped")
	if err := f.MSync(m[4096:]); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	if _, err := f.ReadAt(b, 4096); err != nil || string(b) != "mapped" {
		t.Fatalf("ReadAt after a store through the mapping: %q, %v", b, err)
	}
	fsys.SetInjector(errorfs.Always(syscall.EIO, errorfs.Kinds(errorfs.OpSync)))
	err = f.MSync(m[:4096])
	var ie *errorfs.Error
	if !errors.Is(err, syscall.EIO) || !errors.Is(err, errorfs.ErrInjected) || !errors.As(err, &ie) || ie.Op.Path != path || ie.Op.Len != 4096 {
		t.Fatalf("injected msync error: %v", err)
	}
	if fsys.Injected() != 1 {
		t.Fatalf("injected %d, want 1", fsys.Injected())
	}
}

// TestErrorFSOnIndexAndPredicates: OnIndex fails exactly the n-th
// selected operation; Kinds/InDir/And select as documented.
func TestErrorFSOnIndexAndPredicates(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	fsys := errorfs.Wrap(vfs.Default, nil)
	if err := fsys.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	fsys.SetInjector(errorfs.OnIndex(2, syscall.ENOSPC, errorfs.And(errorfs.Kinds(errorfs.OpCreate), errorfs.InDir(sub))))
	var errs []error
	for _, p := range []string{filepath.Join(dir, "a"), filepath.Join(sub, "b"), filepath.Join(dir, "c"), filepath.Join(sub, "d"), filepath.Join(sub, "e")} {
		f, err := fsys.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			f.Close()
		}
		errs = append(errs, err)
	}
	for i, err := range errs {
		if want := i == 3; (err != nil) != want || want && !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	if _, err := os.Stat(filepath.Join(sub, "d")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a create failed before it ran left the file: %v", err)
	}
}

// TestErrorFSAfter: an error injected after an operation reports a
// failure of an operation that took effect (a rename done).
func TestErrorFSAfter(t *testing.T) {
	dir := t.TempDir()
	fsys := errorfs.Wrap(vfs.Default, nil)
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := vfs.WriteFileSync(fsys, a, []byte("x"), 0, 0o644); err != nil {
		t.Fatal(err)
	}
	var seen []errorfs.Op
	fsys.SetInjector(errorfs.InjectorFunc(func(op errorfs.Op) error {
		seen = append(seen, op)
		if errorfs.AfterKinds(errorfs.OpRename)(op) {
			return syscall.EIO
		}
		return nil
	}))
	if err := fsys.Rename(a, b); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Rename: %v", err)
	}
	if _, err := os.Stat(b); err != nil {
		t.Fatalf("the rename did not take effect: %v", err)
	}
	if len(seen) != 2 || seen[0].After || !seen[1].After || seen[1].NewPath != b {
		t.Fatalf("ops seen: %v", seen)
	}
}

// TestErrorFSTornWrite: Torn writes a prefix, then fails.
func TestErrorFSTornWrite(t *testing.T) {
	fsys := errorfs.Wrap(vfs.Default, nil)
	path := filepath.Join(t.TempDir(), "f")
	f, err := fsys.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fsys.SetInjector(errorfs.Always(errorfs.Torn(3, syscall.EIO), errorfs.Kinds(errorfs.OpWrite)))
	n, err := f.WriteAt([]byte("abcdef"), 10)
	if n != 3 || !errors.Is(err, syscall.EIO) {
		t.Fatalf("torn WriteAt = %d, %v", n, err)
	}
	fsys.SetInjector(nil)
	got := make([]byte, 16)
	if k, _ := f.ReadAt(got, 0); k != 13 || !bytes.Equal(got[10:13], []byte("abc")) {
		t.Fatalf("file holds %q (%d bytes)", got[:k], k)
	}
}
