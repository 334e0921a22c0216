package side

import (
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"unsafe"
)

// On Linux a FrameConn reads and writes its socket with raw system calls
// (syscall.RawSyscall) inside the connection's syscall.RawConn, on the
// non-blocking descriptor the runtime's poller manages: a call that would
// block returns EAGAIN and the goroutine parks in the poller as with
// net.Conn's own Read and Write. What this saves is the runtime's system
// call bookkeeping: syscall.Syscall (net.Conn's path) wakes the runtime's
// monitor thread (sysmon) when the process was idle, and a store plugin's
// round trip makes an idle host and an idle plugin busy again for every
// batch, so each batch could cost a monitor wake-up (and its sleep) in each
// process: about a quarter of the context switches of a lone put. A raw
// call never blocks here (the descriptor is non-blocking) and copies at
// most one frame (bounded by the connection's maxFrame), so it does not
// need to give its P away.

// rawIO is a socket's descriptor reached through RawConn.
type rawIO struct {
	rc   syscall.RawConn
	iovs []syscall.Iovec // reused by writev
}

// sockIO returns how a FrameConn reads c and writes vectors to it: raw
// system calls (above), or net.Conn's own when c offers no RawConn.
func sockIO(c *net.UnixConn) (io.Reader, func([][]byte) error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return c, netWritev(c)
	}
	r := &rawIO{rc: rc}
	return r, r.writev
}

// iovMax is the kernel's IOV_MAX: writev takes at most this many slices.
const iovMax = 1024

// Read reads into p with one read(2) once the socket is readable; it
// returns io.EOF when the peer closed its end.
func (r *rawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var serr error
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			m, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case 0:
				n = int(m)
				return true
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			default:
				serr = os.NewSyscallError("read", e)
				return true
			}
		}
	})
	runtime.KeepAlive(p)
	switch {
	case err != nil:
		return 0, err
	case serr != nil:
		return 0, serr
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// writev writes every byte of bufs (empty slices allowed), IOV_MAX slices
// per writev(2), waiting in the poller while the socket's buffer is full.
func (r *rawIO) writev(bufs [][]byte) error {
	var serr error
	err := r.rc.Write(func(fd uintptr) bool {
		for len(bufs) > 0 {
			iovs := r.iovs[:0]
			for _, b := range bufs {
				if len(iovs) == iovMax {
					break
				}
				if len(b) > 0 {
					iov := syscall.Iovec{Base: &b[0]}
					iov.SetLen(len(b))
					iovs = append(iovs, iov)
				}
			}
			r.iovs = iovs
			if len(iovs) == 0 {
				bufs = nil
				break
			}
			m, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iovs[0])), uintptr(len(iovs)))
			switch e {
			case 0:
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			default:
				serr = os.NewSyscallError("writev", e)
				return true
			}
			bufs = consume(bufs, int(m))
		}
		return true
	})
	clear(r.iovs[:cap(r.iovs)]) // drop the references to the caller's slices
	if err != nil {
		return err
	}
	return serr
}

// consume drops the first n bytes of bufs.
func consume(bufs [][]byte, n int) [][]byte {
	for len(bufs) > 0 {
		if l := len(bufs[0]); n >= l {
			n -= l
			bufs = bufs[1:]
			continue
		}
		bufs[0] = bufs[0][n:]
		break
	}
	return bufs
}
