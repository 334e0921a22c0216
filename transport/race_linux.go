//go:build linux && race

package transport

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// raceWritten tells the race detector that a raw system call wrote the
// first n bytes of iov (unix.Readv does the same for its own calls).
func raceWritten(iov []unix.Iovec, n int) {
	for _, v := range iov {
		m := min(int(v.Len), n)
		if m <= 0 {
			return
		}
		runtime.RaceWriteRange(unsafe.Pointer(v.Base), m)
		n -= m
	}
}

// raceRead tells the race detector that a raw system call read the first n
// bytes of iov (unix.Writev does the same for its own calls).
func raceRead(iov []unix.Iovec, n int) {
	for _, v := range iov {
		m := min(int(v.Len), n)
		if m <= 0 {
			return
		}
		runtime.RaceReadRange(unsafe.Pointer(v.Base), m)
		n -= m
	}
}
