package errorfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"

	"github.com/edsrzf/mmap-go"

	"github.com/replicatorhq/replicator/plugins/commitlog/vfs"
)

// ErrInjected marks every error this package injects (errors.Is).
var ErrInjected = errors.New("errorfs: injected error")

// OpKind names an operation of vfs.FS or vfs.File.
type OpKind uint8

const (
	OpCreate   OpKind = iota + 1 // FS.OpenFile with os.O_CREATE
	OpOpen                       // FS.OpenFile without os.O_CREATE
	OpRead                       // File.Read, File.ReadAt
	OpWrite                      // File.Write, File.WriteAt (a torn write: see Torn)
	OpSync                       // File.Sync, File.MSync, FS.SyncDir
	OpAllocate                   // File.Preallocate
	OpMap                        // File.Map
	OpRename                     // FS.Rename
	OpRemove                     // FS.Remove
	OpMkdir                      // FS.MkdirAll
	OpReadDir                    // FS.ReadDir
	OpStat                       // FS.Stat, File.Stat
)

var opNames = [...]string{OpCreate: "create", OpOpen: "open", OpRead: "read", OpWrite: "write", OpSync: "sync",
	OpAllocate: "allocate", OpMap: "map", OpRename: "rename", OpRemove: "remove", OpMkdir: "mkdir",
	OpReadDir: "readdir", OpStat: "stat"}

func (k OpKind) String() string {
	if int(k) < len(opNames) && opNames[k] != "" {
		return opNames[k]
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Op is one operation, as an Injector sees it.
type Op struct {
	Kind OpKind
	// Path is the file or directory operated on (a rename's old name).
	// For an operation on an open file it is the name the file was
	// opened with, also after the file was renamed.
	Path string
	// NewPath is a rename's new name.
	NewPath string
	// Offset is where ReadAt or WriteAt starts (-1 for Read and Write,
	// at the file's position).
	Offset int64
	// Len is the length read, written or msynced, or the size
	// preallocated or mapped.
	Len int64
	// After is false when the injector is asked before the operation
	// runs (an error then fails it: nothing happens) and true when it is
	// asked again after the operation succeeded (an error then reports a
	// failure of an operation that took effect; crash tests stop the
	// process there).
	After bool
}

func (op Op) String() string {
	s := op.Kind.String() + " " + op.Path
	if op.Kind == OpRename {
		s += " -> " + op.NewPath
	}
	if op.After {
		s += " (after)"
	}
	return s
}

// Injector decides, for each operation, whether it fails: MaybeError
// returns nil to let it run (or stand, when op.After), else the error
// it fails with. It is called from every goroutine that uses the FS.
type Injector interface {
	MaybeError(op Op) error
}

// InjectorFunc adapts a function to an Injector.
type InjectorFunc func(op Op) error

// MaybeError calls f.
func (f InjectorFunc) MaybeError(op Op) error { return f(op) }

// Error is an injected error: the operation and the cause. It wraps
// ErrInjected and the cause (errors.Is(err, syscall.EIO) holds for an
// injected EIO).
type Error struct {
	Op  Op
	Err error
}

func (e *Error) Error() string { return fmt.Sprintf("errorfs: injected into %v: %v", e.Op, e.Err) }

// Unwrap returns ErrInjected and the cause.
func (e *Error) Unwrap() []error { return []error{ErrInjected, e.Err} }

// Torn returns a cause that, injected into a write (before it runs),
// writes the first n bytes and then fails with err: a short write.
// Into any other operation it fails it with err.
func Torn(n int, err error) error { return &tornError{n: n, err: err} }

type tornError struct {
	n   int
	err error
}

func (t *tornError) Error() string { return fmt.Sprintf("torn after %d bytes: %v", t.n, t.err) }
func (t *tornError) Unwrap() error { return t.err }

// FS wraps a vfs.FS and consults an Injector around every operation.
// The injector can be replaced at any time (SetInjector).
type FS struct {
	inner    vfs.FS
	inj      atomic.Pointer[injectorBox]
	injected atomic.Int64
}

type injectorBox struct{ Injector }

var _ vfs.FS = (*FS)(nil)

// Wrap returns inner with errors injected by inj (nil: none yet).
func Wrap(inner vfs.FS, inj Injector) *FS {
	f := &FS{inner: inner}
	f.SetInjector(inj)
	return f
}

// SetInjector replaces the injector; nil injects nothing.
func (f *FS) SetInjector(inj Injector) {
	if inj == nil {
		f.inj.Store(nil)
		return
	}
	f.inj.Store(&injectorBox{inj})
}

// Injected returns how many operations failed by injection so far.
func (f *FS) Injected() int64 { return f.injected.Load() }

func (f *FS) maybe(op Op) error {
	b := f.inj.Load()
	if b == nil {
		return nil
	}
	err := b.MaybeError(op)
	if err == nil {
		return nil
	}
	f.injected.Add(1)
	return &Error{Op: op, Err: err}
}

// run asks before op, runs do, and asks again after a success.
func (f *FS) run(op Op, do func() error) error {
	if err := f.maybe(op); err != nil {
		return err
	}
	if err := do(); err != nil {
		return err
	}
	op.After = true
	return f.maybe(op)
}

// runValue is run for an operation with a result; undo releases a result
// whose operation succeeded but is failed after the fact (op.After).
func runValue[T any](f *FS, op Op, do func() (T, error), undo func(T)) (T, error) {
	var v T
	var done bool
	err := f.run(op, func() error {
		var err error
		v, err = do()
		done = err == nil
		return err
	})
	if err != nil {
		if done && undo != nil {
			undo(v)
		}
		var zero T
		return zero, err
	}
	return v, nil
}

// OpenFile opens name (OpCreate with os.O_CREATE, else OpOpen).
func (f *FS) OpenFile(name string, flag int, perm fs.FileMode) (vfs.File, error) {
	op := Op{Kind: OpOpen, Path: name}
	if flag&os.O_CREATE != 0 {
		op.Kind = OpCreate
	}
	inner, err := runValue(f, op, func() (vfs.File, error) { return f.inner.OpenFile(name, flag, perm) }, func(v vfs.File) { v.Close() })
	if err != nil {
		return nil, err
	}
	return &file{fs: f, f: inner, path: name}, nil
}

// Rename is OpRename.
func (f *FS) Rename(oldname, newname string) error {
	return f.run(Op{Kind: OpRename, Path: oldname, NewPath: newname}, func() error { return f.inner.Rename(oldname, newname) })
}

// Remove is OpRemove.
func (f *FS) Remove(name string) error {
	return f.run(Op{Kind: OpRemove, Path: name}, func() error { return f.inner.Remove(name) })
}

// MkdirAll is OpMkdir.
func (f *FS) MkdirAll(dir string, perm fs.FileMode) error {
	return f.run(Op{Kind: OpMkdir, Path: dir}, func() error { return f.inner.MkdirAll(dir, perm) })
}

// ReadDir is OpReadDir.
func (f *FS) ReadDir(dir string) ([]fs.DirEntry, error) {
	return runValue(f, Op{Kind: OpReadDir, Path: dir}, func() ([]fs.DirEntry, error) { return f.inner.ReadDir(dir) }, nil)
}

// Stat is OpStat.
func (f *FS) Stat(name string) (fs.FileInfo, error) {
	return runValue(f, Op{Kind: OpStat, Path: name}, func() (fs.FileInfo, error) { return f.inner.Stat(name) }, nil)
}

// SyncDir is OpSync on the directory.
func (f *FS) SyncDir(dir string) error {
	return f.run(Op{Kind: OpSync, Path: dir}, func() error { return f.inner.SyncDir(dir) })
}

type file struct {
	fs   *FS
	f    vfs.File
	path string
}

func (f *file) io(op Op, p []byte, do func([]byte) (int, error)) (int, error) {
	if err := f.fs.maybe(op); err != nil {
		var torn *tornError
		if op.Kind != OpWrite || !errors.As(err, &torn) {
			return 0, err
		}
		n, werr := do(p[:min(max(torn.n, 0), len(p))])
		if werr != nil {
			return n, werr
		}
		return n, err
	}
	n, err := do(p)
	if err != nil {
		return n, err
	}
	op.After = true
	return n, f.fs.maybe(op)
}

func (f *file) Read(p []byte) (int, error) {
	return f.io(Op{Kind: OpRead, Path: f.path, Offset: -1, Len: int64(len(p))}, p, f.f.Read)
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	return f.io(Op{Kind: OpRead, Path: f.path, Offset: off, Len: int64(len(p))}, p, func(b []byte) (int, error) { return f.f.ReadAt(b, off) })
}

func (f *file) Write(p []byte) (int, error) {
	return f.io(Op{Kind: OpWrite, Path: f.path, Offset: -1, Len: int64(len(p))}, p, f.f.Write)
}

func (f *file) WriteAt(p []byte, off int64) (int, error) {
	return f.io(Op{Kind: OpWrite, Path: f.path, Offset: off, Len: int64(len(p))}, p, func(b []byte) (int, error) { return f.f.WriteAt(b, off) })
}

func (f *file) Close() error { return f.f.Close() }
func (f *file) Name() string { return f.f.Name() }

func (f *file) Stat() (fs.FileInfo, error) {
	return runValue(f.fs, Op{Kind: OpStat, Path: f.path}, f.f.Stat, nil)
}

func (f *file) Sync() error {
	return f.fs.run(Op{Kind: OpSync, Path: f.path}, f.f.Sync)
}

func (f *file) Preallocate(size int64) error {
	return f.fs.run(Op{Kind: OpAllocate, Path: f.path, Len: size}, func() error { return f.f.Preallocate(size) })
}

func (f *file) Map(length int) (mmap.MMap, error) {
	return runValue(f.fs, Op{Kind: OpMap, Path: f.path, Len: int64(length)}, func() (mmap.MMap, error) { return f.f.Map(length) },
		func(m mmap.MMap) { m.Unmap() })
}

func (f *file) MSync(b []byte) error {
	return f.fs.run(Op{Kind: OpSync, Path: f.path, Len: int64(len(b))}, func() error { return f.f.MSync(b) })
}

// Predicate selects operations.
type Predicate func(op Op) bool

// Kinds selects operations of the given kinds, before they run.
func Kinds(kinds ...OpKind) Predicate {
	return func(op Op) bool { return !op.After && slices.Contains(kinds, op.Kind) }
}

// AfterKinds selects operations of the given kinds once they succeeded.
func AfterKinds(kinds ...OpKind) Predicate {
	return func(op Op) bool { return op.After && slices.Contains(kinds, op.Kind) }
}

// InDir selects operations on entries of dir (not on dir itself).
func InDir(dir string) Predicate {
	dir = filepath.Clean(dir)
	return func(op Op) bool { return filepath.Dir(op.Path) == dir }
}

// PathFunc selects operations whose Path satisfies match.
func PathFunc(match func(path string) bool) Predicate {
	return func(op Op) bool { return match(op.Path) }
}

// And selects operations every predicate selects.
func And(ps ...Predicate) Predicate {
	return func(op Op) bool {
		for _, p := range ps {
			if !p(op) {
				return false
			}
		}
		return true
	}
}

// Always fails every operation p selects with err.
func Always(err error, p Predicate) Injector {
	return InjectorFunc(func(op Op) error {
		if p(op) {
			return err
		}
		return nil
	})
}

// OnIndex fails the n-th operation (1-based) that p selects with err,
// and no other. Safe for concurrent use; the order is the order in which
// the operations reach the injector.
func OnIndex(n int64, err error, p Predicate) Injector {
	var seen atomic.Int64
	return InjectorFunc(func(op Op) error {
		if p(op) && seen.Add(1) == n {
			return err
		}
		return nil
	})
}
