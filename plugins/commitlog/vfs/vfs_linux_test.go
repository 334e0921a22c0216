package vfs

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestWriteAtNoHandoff: the raw pwrite writes at its offset (past the end
// too, extending the file), leaves the other bytes alone, and reports
// failures as WriteAt does (a *fs.PathError wrapping the errno).
func TestWriteAtNoHandoff(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := Default.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, ok := f.(NoHandoffWriterAt)
	if !ok {
		t.Fatal("the OS file system's files on Linux should implement NoHandoffWriterAt")
	}
	if n, err := w.WriteAtNoHandoff([]byte("hello"), 0); n != 5 || err != nil {
		t.Fatalf("WriteAtNoHandoff at 0: %d, %v", n, err)
	}
	big := bytes.Repeat([]byte("x"), 1<<20)
	if n, err := w.WriteAtNoHandoff(big, 8192); n != len(big) || err != nil {
		t.Fatalf("WriteAtNoHandoff past the end: %d, %v", n, err)
	}
	if n, err := w.WriteAtNoHandoff([]byte("J"), 1); n != 1 || err != nil {
		t.Fatalf("WriteAtNoHandoff at 1: %d, %v", n, err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte("hJllo"), make([]byte, 8192-5)...), big...)
	if !bytes.Equal(got, want) {
		t.Fatalf("file holds %d bytes, not what was written (%d)", len(got), len(want))
	}
	if _, err := w.WriteAtNoHandoff([]byte("x"), -1); err == nil {
		t.Error("a negative offset was accepted")
	}

	ro, err := Default.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	_, err = ro.(NoHandoffWriterAt).WriteAtNoHandoff([]byte("x"), 0)
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Path != path || !errors.Is(err, syscall.EBADF) {
		t.Errorf("write to a read-only file: %v, want a *fs.PathError for %s wrapping EBADF", err, path)
	}
}
