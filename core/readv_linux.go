package core

import (
	"io"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/replicatorhq/replicator/transport"
)

// socketVec is the slave's vectored socket reader on a connection with a
// file descriptor: readv(2) through the runtime's poller, so a frame body
// and the next header arrive with one system call. Before it would wait for
// the master it reports the slave's max offset (everything received so far
// is applied); during a long burst it reports at least every reportEvery
// bytes. Every read gets a deadline of HousekeepingInterval: a connection
// that reads nothing for that long closes.
type socketVec struct {
	ss      *slaveSession
	rc      syscall.RawConn
	timeout time.Duration
	since   int64 // bytes read since the last report
}

// newSocketVec returns the vectored reader for the session's connection, or
// false when the connection has no file descriptor (TLS, in-memory).
func newSocketVec(ss *slaveSession) (transport.VectorReader, bool) {
	sc, ok := ss.conn.(syscall.Conn)
	if !ok {
		return nil, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, false
	}
	return &socketVec{ss: ss, rc: rc, timeout: ss.s.cfg.HousekeepingInterval}, true
}

func (r *socketVec) ReadVec(bufs [][]byte) (int, error) {
	if r.since >= reportEvery {
		r.since = 0
		if err := r.ss.report(false); err != nil {
			return 0, err
		}
	}
	if r.timeout > 0 {
		if err := r.ss.conn.SetReadDeadline(time.Now().Add(r.timeout)); err != nil {
			return 0, err
		}
	}
	var n int
	var serr error
	wait := false // the first attempt does not wait: it learns whether to report
	for {
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
		if serr != unix.EAGAIN {
			break
		}
		// Nothing to read: what came so far is applied; report it, then
		// wait for more.
		r.since = 0
		if err := r.ss.report(false); err != nil {
			return 0, err
		}
		wait = true
	}
	if serr != nil {
		return 0, os.NewSyscallError("readv", serr)
	}
	if n == 0 {
		return 0, io.EOF
	}
	r.since += int64(n)
	return n, nil
}
