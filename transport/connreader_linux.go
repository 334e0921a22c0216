package transport

import (
	"io"
	"net"
	"os"
	"syscall"

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
			n, serr = unix.Readv(int(fd), bufs)
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
