package vfs

import (
	"io/fs"
	"unsafe"

	"golang.org/x/sys/windows"
)

// Preallocate on Windows extends the file (SetEndOfFile through
// os.File.Truncate): a write into it can still find the disk full.
func (f osFile) Preallocate(size int64) error { return f.Truncate(size) }

// MSync flushes the view's range (FlushViewOfFile) and then the file's
// buffers (FlushFileBuffers, os.File.Sync), Windows' msync(2) MS_SYNC.
func (f osFile) MSync(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if err := windows.FlushViewOfFile(uintptr(unsafe.Pointer(&b[0])), uintptr(len(b))); err != nil {
		return &fs.PathError{Op: "FlushViewOfFile", Path: f.Name(), Err: err}
	}
	return f.Sync()
}
