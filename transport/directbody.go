package transport

import (
	"errors"
	"fmt"
	"io"
)

// bodyStream is the staging buffer and the body streaming of the direct
// (zero-copy) readers, shared by DirectReader (classic frames) and
// AutoSwitchDirectReader (autoswitch frames): each parses its own headers
// from the staged bytes and then hands the body to read. The body of a
// frame of at least directMin bytes is read straight into the caller's
// buffer (but for what arrived with its header), together with up to a
// header (hdr bytes) of the next frame in one vectored read; after such a
// frame, a pause of the stream at a frame boundary costs a header-sized
// read, so that the next large body goes direct as well. Smaller frames
// are read stagingWindow bytes at a time, many frames per read, and
// copied out.
type bodyStream struct {
	r     VectorReader
	buf   []byte
	start int   // first unconsumed byte of buf
	end   int   // end of buffered bytes
	body  int   // body bytes of the current frame not yet read
	need  int   // size of the current frame (header and body), or of the header awaited, for errors
	rerr  error // pending read error, returned once buffered bytes are used
	iov   [2][]byte
	empty int
	large bool // the last frame's body was read directly: the next fill reads a header only

	hdr    int    // the protocol's header size, read along with a large body
	what   string // the stream's frames in errors ("frame", "master frame")
	unit   string // what a body belongs to in errors ("frame", "transfer frame")
	sticky *error // the owning reader's sticky error
}

// Staging buffer geometry (see bodyStream).
const (
	stagingWindow = 64 << 10
	directMin     = 4 << 10
)

func newBodyStream(r VectorReader, hdr int, what, unit string, sticky *error) bodyStream {
	return bodyStream{r: r, buf: make([]byte, stagingWindow), hdr: hdr, what: what, unit: unit, sticky: sticky}
}

// staged returns the buffered bytes not yet consumed.
func (b *bodyStream) staged() []byte { return b.buf[b.start:b.end] }

// startBody consumes a header of n bytes whose frame has a body of size
// bytes to stream (need: the whole frame, for errors).
func (b *bodyStream) startBody(n, size, need int) {
	b.start += n
	b.body = size
	b.need = need
	b.large = size >= directMin
	b.compact()
}

// skip consumes n staged bytes of a frame handed out whole.
func (b *bodyStream) skip(n int) {
	b.start += n
	b.compact()
}

// read reads the current frame's body into p: at most the body bytes
// still to come, io.EOF once the whole body was read. Staged bytes are
// copied first; then the stream is read into p directly, together with up
// to a header of the next frame.
func (b *bodyStream) read(p []byte) (int, error) {
	if b.body == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p = p[:min(len(p), b.body)]
	if n := b.end - b.start; n > 0 {
		n = copy(p, b.buf[b.start:b.end])
		b.start += n
		b.body -= n
		b.compact()
		return n, nil
	}
	if *b.sticky != nil {
		return 0, *b.sticky
	}
	if err := b.rerr; err != nil {
		b.rerr = nil
		return 0, b.fail(err, b.need-b.body, b.need, b.unit)
	}
	if !b.large {
		// A small frame: read the rest with whatever follows (more small
		// frames, probably) into the staging buffer, then copy.
		if err := b.fill(); err != nil {
			return 0, err
		}
		return b.read(p)
	}
	// Straight into p, and the next header (if it is there) into buf.
	b.start, b.end = 0, 0
	b.iov[0], b.iov[1] = p, b.buf[:b.hdr]
	n, err := b.r.ReadVec(b.iov[:])
	b.iov[0] = nil
	if n < 0 || n > len(p)+b.hdr {
		*b.sticky = fmt.Errorf("transport: read %s: invalid read count %d", b.what, n)
		return 0, *b.sticky
	}
	got := min(n, len(p))
	b.end = n - got
	b.body -= got
	if err != nil {
		if got > 0 || b.end > 0 {
			b.rerr = err
		} else {
			return 0, b.fail(err, b.need-b.body, b.need, b.unit)
		}
	}
	if err := b.progress(n == 0 && err == nil); err != nil {
		return 0, err
	}
	return got, nil
}

// viewer is a VectorReader that can also hand out its bytes without
// copying them (a ConnReader with read-ahead on).
type viewer interface {
	View(max int) ([]byte, error)
	ReadsAhead() bool
}

// canView reports whether view hands out bodies without copying them.
func (b *bodyStream) canView() bool {
	v, ok := b.r.(viewer)
	return ok && v.ReadsAhead()
}

// view is read without the copy: it returns the next bytes of the current
// frame's body, at least one and at most max, in memory that stays valid
// until the next read of the stream (the staging buffer for what arrived
// with the header, else the underlying reader's own memory: see
// ConnReader.View), and io.EOF once the whole body was read. Errors are
// read's. The reader must be able to view (canView), else the body bytes
// that were not staged fail with an error.
func (b *bodyStream) view(max int) ([]byte, error) {
	if b.body == 0 {
		return nil, io.EOF
	}
	if max <= 0 {
		return nil, nil
	}
	max = min(max, b.body)
	if n := b.end - b.start; n > 0 {
		n = min(n, max)
		v := b.buf[b.start : b.start+n : b.start+n]
		b.start += n
		b.body -= n
		b.compact()
		return v, nil
	}
	if *b.sticky != nil {
		return nil, *b.sticky
	}
	if err := b.rerr; err != nil {
		b.rerr = nil
		return nil, b.fail(err, b.need-b.body, b.need, b.unit)
	}
	vr, ok := b.r.(viewer)
	if !ok {
		return nil, fmt.Errorf("transport: read %s: %w", b.what, errNoReadAhead)
	}
	v, err := vr.View(max)
	if len(v) > max {
		*b.sticky = fmt.Errorf("transport: read %s: invalid view of %d bytes", b.what, len(v))
		return nil, *b.sticky
	}
	if err != nil {
		return nil, b.fail(err, b.need-b.body, b.need, b.unit)
	}
	b.body -= len(v)
	if err := b.progress(len(v) == 0); err != nil {
		return nil, err
	}
	return v, nil
}

// Views reports whether View hands out bodies without a copy: the
// reader reads a ConnReader with read-ahead on.
func (d *DirectReader) Views() bool { return d.s.canView() }

// View is Read without the copy: it returns the next bytes of the current
// frame's body, at least one and at most max, and io.EOF once the whole
// body was read. The slice is the reader's memory (its staging buffer or
// the ConnReader's read-ahead ring), valid until the next call of Next,
// Read or View. Only when Views reports true.
func (d *DirectReader) View(max int) ([]byte, error) { return d.s.view(max) }

// Views reports whether View hands out bodies without a copy (see
// DirectReader.Views).
func (d *AutoSwitchDirectReader) Views() bool { return d.s.canView() }

// View is DirectReader.View for a transfer body.
func (d *AutoSwitchDirectReader) View(max int) ([]byte, error) { return d.s.view(max) }

// fill reads once into the staging buffer (it may return with fewer
// bytes than the caller needs; callers loop). It is called with less than
// the next header (or whole frame) buffered, or with nothing buffered and
// a small rest of a body to come.
func (b *bodyStream) fill() error {
	if err := b.rerr; err != nil {
		b.rerr = nil
		avail := b.end - b.start
		if b.body > 0 {
			return b.fail(err, b.need-b.body+avail, b.need, b.unit)
		}
		return b.fail(err, avail, b.need, b.what)
	}
	if b.start > 0 { // less than a header or a small rest is buffered
		b.end = copy(b.buf, b.buf[b.start:b.end])
		b.start = 0
	}
	limit := len(b.buf)
	if b.large && b.body == 0 {
		// After a large frame, a frame boundary where the stream paused:
		// fetch just the next header, so that a large body that follows
		// goes straight to its destination, not through this buffer.
		limit = b.hdr
	}
	b.iov[0], b.iov[1] = b.buf[b.end:limit], nil
	n, err := b.r.ReadVec(b.iov[:1])
	b.iov[0] = nil
	if n < 0 || n > limit-b.end {
		*b.sticky = fmt.Errorf("transport: read %s: invalid read count %d", b.what, n)
		return *b.sticky
	}
	b.end += n
	if err != nil {
		b.rerr = err
		if n == 0 {
			return b.fill()
		}
		return nil
	}
	return b.progress(n == 0)
}

// progress counts reads that returned nothing and no error; too many in
// a row is io.ErrNoProgress.
func (b *bodyStream) progress(empty bool) error {
	if !empty {
		b.empty = 0
		return nil
	}
	if b.empty++; b.empty >= maxEmptyReads {
		return fmt.Errorf("transport: read %s: %w", b.what, io.ErrNoProgress)
	}
	return nil
}

func (b *bodyStream) compact() {
	if b.start == b.end {
		b.start, b.end = 0, 0
	}
}

func (b *bodyStream) fail(err error, have, need int, unit string) error {
	return readFailure(b.sticky, err, have, need, unit, b.what)
}

// readFailure turns a read error of a frame reader into its result:
// io.EOF bare (and sticky) on a clean end between frames (have == 0),
// ErrTruncated (also io.ErrUnexpectedEOF, sticky) inside a frame of need
// bytes of which have arrived, ErrWouldBlock unwrapped and not sticky (the
// caller acts while idle, then reads again, without an allocation), and
// any other error wrapped, not sticky. unit names the frame in a
// truncation, what the stream's frames otherwise.
func readFailure(sticky *error, err error, have, need int, unit, what string) error {
	if errors.Is(err, io.EOF) {
		if have == 0 {
			*sticky = io.EOF
			return io.EOF
		}
		*sticky = fmt.Errorf("%w (%d of %d bytes of a %s): %w", ErrTruncated, have, need, unit, io.ErrUnexpectedEOF)
		return *sticky
	}
	if err == ErrWouldBlock {
		return err
	}
	return fmt.Errorf("transport: read %s: %w", what, err)
}
