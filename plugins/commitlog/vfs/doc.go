// Package vfs is the file-system seam of the commit log
// (plugins/commitlog): the few operations the store performs on its
// directory (open and create, read and pwrite, fsync, fallocate, mmap and
// msync, rename, remove, mkdir, readdir, stat, directory fsync), as an FS
// and a File interface, and Default, the operating system's.
//
// commitlog.Options.FS takes an FS; nil is Default. Tests wrap Default in
// vfs/errorfs to make chosen operations fail (EIO on a flush, ENOSPC on
// a segment's creation, a torn write, a crash at a chosen step), so the
// store itself carries no test hooks. Writes through a mapping (the
// master's appends) are memory stores, not operations of this package: a
// failure there is a SIGBUS, which fallocate at creation rules out.
//
// The interface is pebble's vfs in miniature: the file handle maps itself
// (File.Map, with github.com/edsrzf/mmap-go on a real *os.File) and syncs
// its mapping (File.MSync), so that a wrapper sees and can fail both.
//
// On Linux Default's files also implement NoHandoffWriterAt, the replica's
// pwrite as a raw system call (see there); a wrapper that does not
// implement it sends those writes through WriteAt, where it sees them.
package vfs
