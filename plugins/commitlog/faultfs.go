package commitlog

import (
	"fmt"
	"sync/atomic"
)

// FaultOp names a file operation of the store that a Faults injector can
// make fail. The store writes records (Append) through a shared mapping,
// where a failure is a SIGBUS rather than an error; the operations that
// can fail with an error are the flush, the creation of a segment file and
// a replicated append's write; those are the injection points.
type FaultOp uint8

const (
	// FaultSync is a flush: the msync of the dirty range of each segment
	// (and the directory fsync after a segment was created). An injected
	// error fails the flush before any msync runs, as EIO from the disk
	// would.
	FaultSync FaultOp = iota + 1
	// FaultCreate is the creation of a segment file (open, fallocate), on
	// the append path (roll) and by the preallocator. An injected ENOSPC
	// is a full disk.
	FaultCreate
	// FaultWrite is a replicated append's write (pwrite) into a segment
	// file (AppendAt, AppendAtFrom). An injected error fails the append
	// and leaves the log unchanged, as EIO from the disk would.
	FaultWrite
)

func (op FaultOp) String() string {
	switch op {
	case FaultSync:
		return "sync"
	case FaultCreate:
		return "create"
	case FaultWrite:
		return "write"
	}
	return fmt.Sprintf("FaultOp(%d)", uint8(op))
}

// Faults injects errors into a Log's file operations, for fault tests.
// Give one in Options.Faults; a nil *Faults (the default) injects nothing
// and costs one nil check per flush and per segment creation. Set and
// Clear may be called at any time from any goroutine.
type Faults struct {
	fn       atomic.Pointer[func(op FaultOp, path string) error]
	injected atomic.Int64
}

// Set makes every later operation call fn with the operation and the file
// (or directory) it is about; a non-nil result fails the operation with
// an error wrapping it.
func (f *Faults) Set(fn func(op FaultOp, path string) error) {
	if fn == nil {
		f.fn.Store(nil)
		return
	}
	f.fn.Store(&fn)
}

// Clear stops injecting.
func (f *Faults) Clear() { f.fn.Store(nil) }

// Injected returns how many operations failed by injection so far.
func (f *Faults) Injected() int64 { return f.injected.Load() }

// check is the hook the store calls before op on path; it inlines to a
// nil check when no injector is configured.
func (f *Faults) check(op FaultOp, path string) error {
	if f == nil {
		return nil
	}
	return f.inject(op, path)
}

func (f *Faults) inject(op FaultOp, path string) error {
	p := f.fn.Load()
	if p == nil {
		return nil
	}
	if err := (*p)(op, path); err != nil {
		f.injected.Add(1)
		return fmt.Errorf("commitlog: %s %s: %w", op, path, err)
	}
	return nil
}
