package transport

import (
	"errors"
	"io"
	"net"
	"os"
	"reflect"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawWriter is writev(2) on a TCP connection's file descriptor as a raw
// system call, through the runtime's poller (deadlines apply). The socket
// is non-blocking: a call never sleeps, it lasts as long as its copy;
// when the send buffer is full the poller waits for room and the write
// goes on where it stopped. Through the ordinary system-call entry a
// master's writev of 512 KiB during a catch-up lasted long enough for the
// runtime's monitor thread to retake its P every time, and while that
// kept happening the monitor polled every 20 µs: 11–14 % of the master's
// samples (docs/benchmarks.md). The slave's readv got the same treatment
// (connreader_linux.go).
type rawWriter struct {
	w    io.Writer // the connection rc belongs to (always a pointer)
	conn net.Conn
	rc   syscall.RawConn

	iov    [2 * MaxBatchFrames]unix.Iovec
	i, k   int                   // iov[i:k] is still to be written
	n      int64                 // bytes written
	err    error                 // the system call's failure
	callFn func(fd uintptr) bool // r.call, bound once
}

// rawWriterFor returns the raw writer for w: cur when it belongs to w, a
// new one when w is a TCP connection whose file descriptor it can reach
// (*net.TCPConn, or a pointer to a wrapper that promotes its SyscallConn
// and Write, as net.Buffers already assumes of a wrapper that promotes its
// writev), else nil (TLS connections, pipes, plain writers: net.Buffers).
func rawWriterFor(cur *rawWriter, w io.Writer) *rawWriter {
	if cur != nil && cur.w == w { // cur.w is a pointer: no panic
		return cur
	}
	sc, ok := w.(syscall.Conn)
	if !ok {
		return nil
	}
	conn, ok := w.(net.Conn)
	if !ok || reflect.TypeOf(w).Kind() != reflect.Pointer {
		return nil
	}
	if _, ok := conn.LocalAddr().(*net.TCPAddr); !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &rawWriter{w: w, conn: conn, rc: rc}
	r.callFn = r.call
	return r
}

// writev writes all of bufs (at most 2*MaxBatchFrames) and returns the
// bytes written. A deadline that expires or a close while the send buffer
// is full ends it with the poller's error (os.ErrDeadlineExceeded,
// net.ErrClosed), a failed system call with its errno, both as a
// *net.OpError as net.Buffers returns them.
func (r *rawWriter) writev(bufs [][]byte) (int64, error) {
	r.i, r.k, r.n, r.err = 0, 0, 0, nil
	for _, b := range bufs {
		if len(b) > 0 {
			r.iov[r.k].Base = &b[0]
			r.iov[r.k].SetLen(len(b))
			r.k++
		}
	}
	err := r.rc.Write(r.callFn)
	clear(r.iov[:r.k]) // drop the references to the bodies
	n := r.n
	var op *net.OpError
	switch {
	case err != nil && errors.As(err, &op):
		op.Op = "writev" // the poller's error reads "raw-write"
		return n, op
	case err != nil:
		return n, err
	case r.err != nil:
		return n, &net.OpError{Op: "writev", Net: "tcp", Source: r.conn.LocalAddr(), Addr: r.conn.RemoteAddr(), Err: r.err}
	}
	return n, nil
}

// call is the poller's callback: it writes what is left, and returns false
// to wait for room in the send buffer.
func (r *rawWriter) call(fd uintptr) bool {
	for r.i < r.k {
		m, _, e := unix.RawSyscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&r.iov[r.i])), uintptr(r.k-r.i))
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			return false
		case e != 0:
			r.err = os.NewSyscallError("writev", e)
			return true
		case m == 0: // never for a socket with room: no endless loop
			r.err = io.ErrShortWrite
			return true
		}
		raceRead(r.iov[r.i:r.k], int(m))
		r.advance(int(m))
	}
	return true
}

// advance moves past m written bytes.
func (r *rawWriter) advance(m int) {
	r.n += int64(m)
	for m > 0 {
		v := &r.iov[r.i]
		l := int(v.Len)
		if m < l {
			v.Base = (*byte)(unsafe.Add(unsafe.Pointer(v.Base), m))
			v.SetLen(l - m)
			return
		}
		m -= l
		r.i++
	}
}
