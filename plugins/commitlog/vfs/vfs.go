package vfs

import (
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/edsrzf/mmap-go"
)

// FS is the file system under a commit log: the operations the store
// performs on its directory, and nothing else. Paths are the host's
// (absolute or relative to the working directory). Implementations are
// safe for concurrent use. Errors are those of package os (errors.Is
// with fs.ErrNotExist, fs.ErrExist, syscall errnos), possibly wrapped.
type FS interface {
	// OpenFile opens name with os.OpenFile's flags and permissions.
	// With os.O_CREATE it creates the file (Op "create" in errorfs).
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	// Rename renames oldname to newname, replacing newname (rename(2)).
	Rename(oldname, newname string) error
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// MkdirAll creates dir and any missing parents.
	MkdirAll(dir string, perm fs.FileMode) error
	// ReadDir lists dir, sorted by name.
	ReadDir(dir string) ([]fs.DirEntry, error)
	// Stat describes name, following symbolic links. For the OS file
	// system FileInfo.Sys is a *syscall.Stat_t.
	Stat(name string) (fs.FileInfo, error)
	// SyncDir makes the entries of dir (created, renamed, removed
	// files) durable: fsync(2) of the directory.
	SyncDir(dir string) error
}

// File is an open file of an FS. It is safe for concurrent use as an
// os.File is (ReadAt, WriteAt and MSync at distinct ranges concurrently).
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.WriterAt
	io.Closer
	// Name is the name the file was opened with.
	Name() string
	Stat() (fs.FileInfo, error)
	// Sync makes the file's contents durable (fsync(2)).
	Sync() error
	// Preallocate reserves disk blocks for [0, size) and makes the file
	// that long (fallocate(2) on Linux; a file system without it, and
	// other systems, extend the file with ftruncate(2) instead, where a
	// write can still find the disk full).
	Preallocate(size int64) error
	// Map maps [0, length) of the file shared and read-write
	// (github.com/edsrzf/mmap-go). The caller unmaps it (MMap.Unmap),
	// before it closes the file.
	Map(length int) (mmap.MMap, error)
	// MSync writes b, a range of this file's mapping starting on a page
	// boundary, back to disk and waits for it (msync(2) MS_SYNC; on
	// Windows FlushViewOfFile and FlushFileBuffers).
	MSync(b []byte) error
}

// NoHandoffWriterAt is implemented by the operating system's files on
// Linux. WriteAtNoHandoff is WriteAt made as raw pwrite(2) calls, without
// the Go runtime's system-call hand-off: the calling goroutine keeps its
// P (and blocks it) while the kernel copies, where an ordinary system
// call of 20 µs or more lets the runtime's monitor thread retake the P
// and, while that keeps happening, poll every 20 µs. For writes into the
// page cache that copy a frame and return, that is cheaper; a write that
// the kernel throttles or that waits for the disk holds the P meanwhile,
// so callers use it only with other Ps to run the rest of the program
// (GOMAXPROCS > 1). The file must stay open until it returns.
type NoHandoffWriterAt interface {
	WriteAtNoHandoff(p []byte, off int64) (int, error)
}

// Default is the operating system's file system.
var Default FS = osFS{}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Rename(oldname, newname string) error        { return os.Rename(oldname, newname) }
func (osFS) Remove(name string) error                    { return os.Remove(name) }
func (osFS) MkdirAll(dir string, perm fs.FileMode) error { return os.MkdirAll(dir, perm) }
func (osFS) ReadDir(dir string) ([]fs.DirEntry, error)   { return os.ReadDir(dir) }
func (osFS) Stat(name string) (fs.FileInfo, error)       { return os.Stat(name) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// osFile is an *os.File; the mapping of mmap-go needs the real one.
type osFile struct{ *os.File }

func (f osFile) Map(length int) (mmap.MMap, error) {
	return mmap.MapRegion(f.File, length, mmap.RDWR, 0, 0)
}

// ReadFile reads the whole file name of fsys, as os.ReadFile.
func ReadFile(fsys FS, name string) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return b, nil
}

// WriteFileSync creates (or truncates) name with data and fsyncs it
// before closing; it does not sync the directory.
func WriteFileSync(fsys FS, name string, data []byte, flag int, perm fs.FileMode) error {
	f, err := fsys.OpenFile(name, os.O_CREATE|os.O_WRONLY|flag, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
