package transport

import (
	"errors"
	"sync"
)

// Read-ahead: a ConnReader with a file descriptor can read the socket on a
// goroutine of its own, into a ring of buffers, while its caller works on
// what was read before (a slave writes frame k to its store while frame
// k+1 arrives). The caller's reads copy out of the ring, or take views of
// it (View: a slave's store writes the bodies from the ring). Arm keeps
// its meaning: an armed read with nothing in the ring returns
// ErrWouldBlock once the socket is empty.
//
// The goroutine runs only while the socket holds a backlog. It is started
// when a read by the caller returns at least aheadStart bytes (the kernel
// held that much: a catch-up), and it pauses, handing the socket
// back to the caller, as soon as it finds the socket empty. A link that
// carries small frames as they are produced (sync replication) is then
// read by the caller directly, without a goroutine hand-off per frame,
// which cost a third of a sync slave's CPU per message and a wake-up per
// frame of latency (docs/benchmarks.md); a catch-up keeps its overlap.

// Read-ahead geometry: aheadBufs buffers of aheadSize bytes; a read of
// aheadStart bytes or more by the caller starts the goroutine. Each
// buffer is one hand-off between the goroutine and the caller (a thread
// wake-up when the other side waits, as it does when one side is the
// slower): 1 MiB buffers cost the slave of a catch-up less CPU per KB than
// 256 KiB ones once its store writes from the ring instead of copying out
// of it (docs/benchmarks.md, session 11).
const (
	aheadBufs  = 4
	aheadSize  = 1 << 20
	aheadStart = 256 << 10
)

// ahead is the read-ahead state of a ConnReader.
type ahead struct {
	free chan []byte // buffers the goroutine (or the direct read) may fill
	// full: filled buffers in stream order, then a pause marker (a chunk
	// with a nil buffer and no error) when the goroutine found the socket
	// empty and ended.
	full    chan chunk
	running bool          // a goroutine owns the socket (caller's view)
	stop    chan struct{} // closed by StopReadAhead
	wg      sync.WaitGroup
	cur     []byte // unread bytes of the buffer being consumed
	buf     []byte // that buffer, returned to free once consumed
	err     error  // the final read error, once its bytes are consumed
	one     [1][]byte
}

type chunk struct {
	b   []byte
	err error
}

// StartReadAhead turns read-ahead on: from now on the reader reads the
// socket through its ring, on a goroutine of its own while a backlog
// lasts. A goroutine ends when it finds the socket empty or a read fails
// (when the connection is closed, at the latest); StopReadAhead waits for
// it. Without a file descriptor it does nothing and returns false. Not
// safe to call with a read in progress.
func (r *ConnReader) StartReadAhead() bool {
	if r.fd == nil || r.ah != nil {
		return false
	}
	a := &ahead{
		free: make(chan []byte, aheadBufs),
		full: make(chan chunk, aheadBufs+1), // the buffers and a pause marker
		stop: make(chan struct{}),
	}
	for range aheadBufs {
		a.free <- make([]byte, aheadSize)
	}
	r.ah = a
	return true
}

// StopReadAhead ends the read-ahead goroutine, if one runs, and waits for
// it; the caller closes the connection first. The reader is not usable
// afterwards.
func (r *ConnReader) StopReadAhead() {
	if r.ah != nil {
		close(r.ah.stop)
		r.ah.wg.Wait()
	}
}

// runAhead starts the goroutine (the caller holds no read in progress).
func (r *ConnReader) runAhead(a *ahead) {
	a.running = true
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		r.readAhead(a)
	}()
}

// readAhead is the read-ahead goroutine: fill a free buffer with what the
// socket holds and hand it over, again, until the socket is empty (then
// it hands over a pause marker and ends: the caller reads on) or a read
// fails. It never waits for the peer.
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
			a.free <- b
			a.full <- chunk{}
			return
		}
		a.full <- chunk{b: b[:n], err: err}
		if err != nil {
			return
		}
	}
}

// ReadsAhead reports whether read-ahead is on (StartReadAhead returned
// true): then View hands out the ring's bytes without copying them.
func (r *ConnReader) ReadsAhead() bool { return r.ah != nil }

// errNoReadAhead: View on a reader without read-ahead.
var errNoReadAhead = errors.New("transport: view of a reader without read-ahead")

// View returns the next bytes of the stream, at least one and at most max
// of them, from the read-ahead ring without copying them, and consumes
// them, as Read would. The slice is the ring's memory: it stays valid
// until the next call of Read, ReadVec or View (the ring buffer it lies in
// goes back to the read-ahead goroutine only when a later read has used it
// up), so the caller uses it before reading on. A view never spans two
// ring buffers: at a buffer's end it is shorter than max. Errors and
// waiting are those of Read; without read-ahead (ReadsAhead false) View
// fails.
func (r *ConnReader) View(max int) ([]byte, error) {
	a := r.ah
	if a == nil {
		return nil, errNoReadAhead
	}
	if max <= 0 {
		return nil, nil
	}
	if len(a.cur) == 0 {
		if err := r.aheadNext(a); err != nil {
			return nil, err
		}
	}
	k := min(max, len(a.cur))
	v := a.cur[:k:k]
	a.cur = a.cur[k:]
	return v, nil
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
// one to the ring: the goroutine's next chunk while it runs, else a
// buffer the caller fills itself (waiting for the peer unless armed).
func (r *ConnReader) aheadNext(a *ahead) error {
	if a.buf != nil {
		a.free <- a.buf[:cap(a.buf)]
		a.buf = nil
	}
	if a.err != nil {
		return a.err
	}
	for a.running {
		c := <-a.full
		if c.b == nil && c.err == nil {
			a.running = false // paused: the socket is the caller's again
			break
		}
		a.err = c.err // the bytes of a failed read's chunk come first
		a.buf, a.cur = c.b, c.b
		if len(a.cur) > 0 {
			return nil
		}
		a.buf = nil
		a.free <- c.b[:cap(c.b)]
		if a.err != nil {
			return a.err
		}
	}
	b := <-a.free // all buffers are back: the goroutine has ended
	a.one[0] = b
	n, err := r.directVec(a.one[:])
	a.one[0] = nil
	if n == 0 {
		a.free <- b
		if !errors.Is(err, ErrWouldBlock) {
			a.err = err
		}
		return err
	}
	a.err = err
	a.buf, a.cur = b[:n], b[:n]
	if n >= aheadStart && err == nil {
		r.runAhead(a) // a backlog: read on while the caller works
	}
	return nil
}
