package transport

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawReader is readv(2) on a connection's file descriptor, through the
// runtime's poller (deadlines apply).
type rawReader struct{ rc syscall.RawConn }

func newFDReader(conn net.Conn) fdReader {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rawReader{rc}
}

func (r rawReader) readVec(bufs [][]byte, wait bool) (int, error) {
	var n int
	var serr error
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			n, serr = readvNoHandoff(int(fd), bufs)
			if serr != unix.EINTR {
				break
			}
		}
		return serr != unix.EAGAIN || !wait
	})
	if err != nil {
		return 0, err // deadline exceeded, connection closed
	}
	switch {
	case serr == unix.EAGAIN:
		return 0, ErrWouldBlock
	case serr != nil:
		return 0, os.NewSyscallError("readv", serr)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// rawIovecs bounds the buffers readvNoHandoff passes on the stack; the
// frame readers pass one or two.
const rawIovecs = 4

// readvNoHandoff is readv(2) as a raw system call, without the runtime's
// system-call hand-off. The socket is non-blocking (the runtime's poller
// does the waiting), so the call never sleeps: it lasts as long as its
// copy. Through the ordinary entry, a catch-up's slave spent 10 % of its
// CPU in the runtime's monitor thread: while its read-ahead goroutine's
// reads and its receive loop's writes to the store overlap, no P is idle,
// so the monitor retakes every P that sits in a system call for 20 µs
// and, finding work to retake, polls again 20 µs later
// (docs/benchmarks.md). More than rawIovecs buffers go through unix.Readv.
func readvNoHandoff(fd int, bufs [][]byte) (int, error) {
	if len(bufs) > rawIovecs {
		return unix.Readv(fd, bufs)
	}
	var iov [rawIovecs]unix.Iovec
	k := 0
	for _, b := range bufs {
		if len(b) > 0 {
			iov[k].Base = &b[0]
			iov[k].SetLen(len(b))
			k++
		}
	}
	if k == 0 {
		return 0, nil
	}
	r, _, e := unix.RawSyscall(unix.SYS_READV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(k))
	if e != 0 {
		return 0, e
	}
	raceWritten(iov[:k], int(r))
	return int(r), nil
}
