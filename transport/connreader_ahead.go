package transport

import (
	"errors"
	"sync"
	"sync/atomic"
)

// Read-ahead: a ConnReader with a file descriptor can read the socket on a
// goroutine of its own, into a ring of buffers, while its caller works on
// what was read before (a slave writes frame k to its store while frame
// k+1 arrives). The caller's reads copy out of the ring. Arm keeps its
// meaning: an armed read with nothing in the ring returns ErrWouldBlock
// once the read-ahead goroutine found the socket empty and waits for the
// peer.

// Read-ahead geometry: aheadBufs buffers of aheadSize bytes.
const (
	aheadBufs = 4
	aheadSize = 256 << 10
)

// ahead is the read-ahead state of a ConnReader.
type ahead struct {
	free chan []byte // buffers the goroutine may fill
	full chan chunk  // filled buffers, in stream order
	// waiting: the goroutine found the socket empty and waits for the
	// peer; idle is signalled after waiting is set (a token may be
	// stale: the consumer checks waiting again).
	waiting atomic.Bool
	idle    chan struct{}
	stop    chan struct{} // closed by StopReadAhead
	wg      sync.WaitGroup
	cur     []byte // unread bytes of the buffer being consumed
	buf     []byte // that buffer, returned to free once consumed
	err     error  // the goroutine's final error, once its chunks are consumed
}

type chunk struct {
	b   []byte
	err error
}

// StartReadAhead starts reading the connection ahead of the caller, on a
// goroutine that ends when a read fails: when the connection is closed,
// at the latest. Stop waits for it. Without a file descriptor it does
// nothing and returns false. Not safe to call with a read in progress.
func (r *ConnReader) StartReadAhead() bool {
	if r.fd == nil || r.ah != nil {
		return false
	}
	a := &ahead{
		free: make(chan []byte, aheadBufs),
		full: make(chan chunk, aheadBufs),
		idle: make(chan struct{}, 1),
		stop: make(chan struct{}),
	}
	for range aheadBufs {
		a.free <- make([]byte, aheadSize)
	}
	r.ah = a
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		r.readAhead(a)
	}()
	return true
}

// StopReadAhead ends the read-ahead goroutine and waits for it; the
// caller closes the connection first (that ends a read in progress).
// The reader is not usable afterwards.
func (r *ConnReader) StopReadAhead() {
	if r.ah != nil {
		close(r.ah.stop)
		r.ah.wg.Wait()
	}
}

// readAhead is the read-ahead goroutine: fill a free buffer with what the
// socket holds (waiting for the peer, under the idle deadline, only when
// it holds nothing), hand it over, again, until a read fails.
func (r *ConnReader) readAhead(a *ahead) {
	var one [1][]byte
	for {
		var b []byte
		select {
		case b = <-a.free:
		case <-a.stop:
			return
		}
		one[0] = b
		n, err := r.fd.readVec(one[:], false)
		if errors.Is(err, ErrWouldBlock) {
			a.waiting.Store(true)
			select {
			case a.idle <- struct{}{}:
			default: // a token is there already
			}
			if err = r.deadline(); err == nil {
				n, err = r.fd.readVec(one[:], true)
			}
			a.waiting.Store(false)
		}
		a.full <- chunk{b: b[:n], err: err}
		if err != nil {
			return
		}
	}
}

// aheadVec is ReadVec from the ring.
func (r *ConnReader) aheadVec(bufs [][]byte) (int, error) {
	a := r.ah
	if len(a.cur) == 0 {
		if err := r.aheadNext(a); err != nil {
			return 0, err
		}
	}
	n := 0
	for _, b := range bufs {
		k := copy(b, a.cur)
		a.cur = a.cur[k:]
		n += k
		if len(a.cur) == 0 {
			break
		}
	}
	return n, nil
}

// aheadNext makes the next filled buffer current, returning the consumed
// one to the goroutine.
func (r *ConnReader) aheadNext(a *ahead) error {
	if a.buf != nil {
		a.free <- a.buf[:cap(a.buf)]
		a.buf = nil
	}
	if a.err != nil {
		return a.err
	}
	var c chunk
	if r.armed {
	wait:
		for {
			select {
			case c = <-a.full:
				break wait
			default:
			}
			if a.waiting.Load() {
				r.armed = false
				return ErrWouldBlock
			}
			select {
			case c = <-a.full:
				break wait
			case <-a.idle:
			}
		}
	} else {
		c = <-a.full
	}
	a.err = c.err // the bytes of a failed read's chunk come first
	a.buf, a.cur = c.b, c.b
	if len(a.cur) == 0 {
		return r.aheadNext(a)
	}
	return nil
}
