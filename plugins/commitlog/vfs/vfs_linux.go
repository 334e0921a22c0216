package vfs

import (
	"errors"
	"io"
	"io/fs"
	"runtime"
	"unsafe"

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

// WriteAtNoHandoff implements NoHandoffWriterAt.
func (f osFile) WriteAtNoHandoff(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, &fs.PathError{Op: "writeat", Path: f.Name(), Err: errors.New("negative offset")}
	}
	fd := f.Fd()
	n := 0
	for n < len(p) {
		r, _, e := unix.RawSyscall6(unix.SYS_PWRITE64, fd, uintptr(unsafe.Pointer(&p[n])), uintptr(len(p)-n), uintptr(off+int64(n)), 0, 0)
		switch {
		case e == unix.EINTR:
			continue
		case e != 0:
			runtime.KeepAlive(f.File)
			raceRead(p[:n])
			return n, &fs.PathError{Op: "write", Path: f.Name(), Err: e}
		case r == 0:
			runtime.KeepAlive(f.File)
			raceRead(p[:n])
			return n, &fs.PathError{Op: "write", Path: f.Name(), Err: io.ErrShortWrite}
		}
		n += int(r)
	}
	runtime.KeepAlive(f.File)
	raceRead(p)
	return n, nil
}
