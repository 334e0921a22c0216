package vfs

import (
	"errors"
	"io/fs"

	"golang.org/x/sys/unix"
)

func (f osFile) Preallocate(size int64) error {
	err := unix.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return f.Truncate(size)
	}
	if err != nil {
		return &fs.PathError{Op: "fallocate", Path: f.Name(), Err: err}
	}
	return nil
}

func (f osFile) MSync(b []byte) error {
	if err := unix.Msync(b, unix.MS_SYNC); err != nil {
		return &fs.PathError{Op: "msync", Path: f.Name(), Err: err}
	}
	return nil
}
