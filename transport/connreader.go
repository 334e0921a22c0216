package transport

import (
	"errors"
	"net"
	"time"
)

// ErrWouldBlock is returned by an armed ConnReader instead of waiting for
// the peer: everything received so far has been handed out. A frame reader
// passes it up (wrapped, not sticky, buffered bytes kept), so that its
// caller can act while the link is idle (a slave reports its offset) and
// call Next again, which then waits.
var ErrWouldBlock = errors.New("transport: read would wait for the peer")

// ConnReader reads a connection for a slave's receive loop: an io.Reader
// and a VectorReader (readv(2) through the runtime's poller on a connection
// with a file descriptor, plain TCP on Linux) that sets a read deadline of
// idle before every read that may wait, so a connection that delivers
// nothing for that long fails with os.ErrDeadlineExceeded.
//
// Arm makes the next read that would wait return ErrWouldBlock instead
// (once; the reader disarms itself). On a connection with a file
// descriptor the read first tries the socket without waiting, so bytes the
// kernel already holds are read at once; without one (TLS, in-memory
// connections) an armed read returns ErrWouldBlock without looking. It is
// not safe for concurrent use.
type ConnReader struct {
	conn  net.Conn
	idle  time.Duration
	armed bool
	fd    fdReader // nil without a file descriptor
	one   [1][]byte
	ah    *ahead // read-ahead (connreader_ahead.go), nil when off
}

// NewConnReader returns a ConnReader on conn; idle <= 0: no deadline.
func NewConnReader(conn net.Conn, idle time.Duration) *ConnReader {
	return &ConnReader{conn: conn, idle: idle, fd: newFDReader(conn)}
}

// Vectored reports whether ReadVec fills several buffers with one system
// call (the connection has a file descriptor).
func (r *ConnReader) Vectored() bool { return r.fd != nil }

// Arm makes the next read that would wait return ErrWouldBlock.
func (r *ConnReader) Arm() { r.armed = true }

// Disarm undoes Arm.
func (r *ConnReader) Disarm() { r.armed = false }

func (r *ConnReader) deadline() error {
	if r.idle > 0 {
		return r.conn.SetReadDeadline(time.Now().Add(r.idle))
	}
	return nil
}

// Read reads into p.
func (r *ConnReader) Read(p []byte) (int, error) {
	if r.ah != nil {
		r.one[0] = p
		n, err := r.aheadVec(r.one[:])
		r.one[0] = nil
		return n, err
	}
	if r.fd != nil {
		r.one[0] = p
		n, err := r.ReadVec(r.one[:])
		r.one[0] = nil
		return n, err
	}
	if r.armed {
		r.armed = false
		return 0, ErrWouldBlock
	}
	if err := r.deadline(); err != nil {
		return 0, err
	}
	return r.conn.Read(p)
}

// ReadVec reads into bufs in order (readv(2) with a file descriptor, else
// into the first non-empty buffer).
func (r *ConnReader) ReadVec(bufs [][]byte) (int, error) {
	if r.ah != nil {
		return r.aheadVec(bufs)
	}
	if r.fd == nil {
		for _, b := range bufs {
			if len(b) > 0 {
				return r.Read(b)
			}
		}
		return 0, nil
	}
	return r.directVec(bufs)
}

// directVec is ReadVec on the file descriptor.
func (r *ConnReader) directVec(bufs [][]byte) (int, error) {
	if r.armed {
		n, err := r.fd.readVec(bufs, false)
		if !errors.Is(err, ErrWouldBlock) {
			return n, err
		}
		r.armed = false
		return 0, ErrWouldBlock
	}
	if err := r.deadline(); err != nil {
		return 0, err
	}
	return r.fd.readVec(bufs, true)
}

// fdReader reads a file descriptor through the runtime's poller.
type fdReader interface {
	// readVec reads into bufs; with wait false it returns ErrWouldBlock
	// rather than waiting.
	readVec(bufs [][]byte, wait bool) (int, error)
}
