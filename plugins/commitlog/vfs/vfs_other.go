//go:build !linux && !windows

package vfs

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// Preallocate without fallocate(2) (Linux only) extends the file with
// ftruncate(2): a write into it can still find the disk full.
func (f osFile) Preallocate(size int64) error { return f.Truncate(size) }

func (f osFile) MSync(b []byte) error {
	if err := unix.Msync(b, unix.MS_SYNC); err != nil {
		return &fs.PathError{Op: "msync", Path: f.Name(), Err: err}
	}
	return nil
}
