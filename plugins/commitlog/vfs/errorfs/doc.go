// Package errorfs wraps a vfs.FS so that chosen operations fail: the
// fault-injection seam of the commit log's tests and of the fault suite
// (faults/), in the manner of pebble's vfs/errorfs.
//
// Wrap(vfs.Default, inj) returns an FS that asks the Injector before
// every operation (Op{Kind, Path, ...}) and again after each one that
// succeeded (Op.After). A non-nil answer fails the operation with an
// *Error wrapping ErrInjected and the answer, so callers and tests check
// the cause with errors.Is (syscall.EIO, syscall.ENOSPC). Injectors are
// built from predicates:
//
//	fsys := errorfs.Wrap(vfs.Default, nil)
//	opts.FS = fsys
//	// every msync, fsync and directory fsync fails with EIO
//	fsys.SetInjector(errorfs.Always(syscall.EIO, errorfs.Kinds(errorfs.OpSync)))
//	// the third file created in dir fails with ENOSPC
//	fsys.SetInjector(errorfs.OnIndex(3, syscall.ENOSPC, errorfs.And(errorfs.Kinds(errorfs.OpCreate), errorfs.InDir(dir))))
//	// a write that stores 100 bytes, then fails (a torn write)
//	fsys.SetInjector(errorfs.Always(errorfs.Torn(100, syscall.EIO), errorfs.Kinds(errorfs.OpWrite)))
//	fsys.SetInjector(nil) // the disk works again
//
// An InjectorFunc may also block (a stuck fsync) or stop the process
// (a crash at an exact step: match Op.After on a rename to crash right
// after it took effect). Writes through a mapping are memory stores, not
// operations: only their msync passes through here.
package errorfs
