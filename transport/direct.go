package transport

import (
	"errors"
	"fmt"
	"io"
)

// VectorReader reads from a byte stream into several buffers with one call,
// as readv(2): it fills bufs in order and returns the total count. Like
// io.Reader it may return fewer bytes than asked for; io.EOF means the
// stream ended.
type VectorReader interface {
	ReadVec(bufs [][]byte) (int, error)
}

// ReaderVec adapts an io.Reader to a VectorReader that reads into the first
// non-empty buffer only.
type ReaderVec struct{ R io.Reader }

// ReadVec reads into the first non-empty buffer of bufs.
func (r ReaderVec) ReadVec(bufs [][]byte) (int, error) {
	for _, b := range bufs {
		if len(b) > 0 {
			return r.R.Read(b)
		}
	}
	return 0, nil
}

// Header is a parsed frame header. Size 0 is a heartbeat.
type Header struct {
	Offset int64
	Size   int
}

// DirectReader parses master->slave frames, like FrameReader, but hands
// each body to its destination instead of returning a view of its own
// buffer: after Next returns a header, the body is read through the
// DirectReader's io.Reader side (Read) straight into the caller's memory, a
// slave's commit-log mapping for example. The part of a body that arrived
// together with its header is copied out of a small staging buffer; the
// rest of a large body is read from the stream directly into the caller's
// buffer, together with the next frame's header in the same vectored read
// (readv on TCP). While the slave keeps up with a stream of large frames,
// that is one system call and no user-space copy per frame.
//
// Errors are those of FrameReader (see there): io.EOF bare on a clean end
// between frames, ErrTruncated (also io.ErrUnexpectedEOF) inside a frame,
// sticky *HeaderError protocol violations, and wrapped read errors after
// which Next or Read may be called again (a read deadline, for example).
// It is not safe for concurrent use.
type DirectReader struct {
	r       VectorReader
	buf     []byte
	start   int // first unconsumed byte of buf
	end     int // end of buffered bytes
	maxBody int
	body    int   // body bytes of the current frame not yet read
	need    int   // size of the current frame (header and body), for errors
	rerr    error // pending read error, returned once buffered bytes are used
	sticky  error
	herr    HeaderError
	iov     [2][]byte
	empty   int
	large   bool  // the last frame's body was read directly: the next fill reads a header only
	staged  int64 // body bytes copied out of the staging buffer (tests)
}

// Staging buffer geometry. The body of a frame of at least directMin bytes
// is read straight into the caller's buffer (but for what arrived with its
// header), together with the next header; after such a frame, a pause of
// the stream at a frame boundary costs a header-sized read, so that the
// next large body goes direct as well. Smaller frames are read
// stagingWindow bytes at a time, many frames per read, and copied out.
const (
	stagingWindow = 64 << 10
	directMin     = 4 << 10
)

// NewDirectReader returns a DirectReader on r accepting bodies of at most
// maxBody bytes (<= 0 or above MaxBodyLimit: MaxBodyLimit).
func NewDirectReader(r VectorReader, maxBody int) *DirectReader {
	if maxBody <= 0 || maxBody > MaxBodyLimit {
		maxBody = MaxBodyLimit
	}
	return &DirectReader{r: r, buf: make([]byte, stagingWindow), maxBody: maxBody}
}

// MaxBody is the largest body this reader accepts.
func (d *DirectReader) MaxBody() int { return d.maxBody }

// Buffered is the number of bytes read from the stream and not yet handed
// out (headers parsed but not returned count too).
func (d *DirectReader) Buffered() int { return d.end - d.start }

// Remaining is the number of body bytes of the current frame not yet read.
func (d *DirectReader) Remaining() int { return d.body }

// Next returns the next frame's header, validated, blocking until its 12
// bytes are buffered. The body (Size bytes) must then be read with Read
// before the next call: calling Next with body bytes pending returns
// ErrBodyPending.
func (d *DirectReader) Next() (Header, error) {
	if d.sticky != nil {
		return Header{}, d.sticky
	}
	if d.body > 0 {
		return Header{}, ErrBodyPending
	}
	for d.end-d.start < HeaderSize {
		if err := d.fill(); err != nil {
			return Header{}, err
		}
	}
	off, size := ParseHeader(d.buf[d.start:])
	if err := d.check(off, size); err != nil {
		return Header{}, err
	}
	d.start += HeaderSize
	d.body = int(size)
	d.need = HeaderSize + int(size)
	d.large = int(size) >= directMin
	d.compact()
	return Header{Offset: off, Size: int(size)}, nil
}

// ErrBodyPending: DirectReader.Next was called before the previous frame's
// body was read.
var ErrBodyPending = errors.New("transport: frame body not read")

// Read reads the current frame's body into p: at most the body bytes still
// to come, io.EOF once the whole body was read. Buffered bytes are copied
// first; then the stream is read into p directly, together with up to a
// header of the next frame.
func (d *DirectReader) Read(p []byte) (int, error) {
	if d.body == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p = p[:min(len(p), d.body)]
	if n := d.end - d.start; n > 0 {
		n = copy(p, d.buf[d.start:d.end])
		d.start += n
		d.body -= n
		d.staged += int64(n)
		d.compact()
		return n, nil
	}
	if d.sticky != nil {
		return 0, d.sticky
	}
	if err := d.rerr; err != nil {
		d.rerr = nil
		return 0, d.readError(err, d.need-d.body, d.need)
	}
	if !d.large {
		// A small frame: read the rest with whatever follows (more small
		// frames, probably) into the staging buffer, then copy.
		if err := d.fill(); err != nil {
			return 0, err
		}
		return d.Read(p)
	}
	// Straight into p, and the next header (if it is there) into buf.
	d.start, d.end = 0, 0
	d.iov[0], d.iov[1] = p, d.buf[:HeaderSize]
	n, err := d.r.ReadVec(d.iov[:])
	d.iov[0] = nil
	if n < 0 || n > len(p)+HeaderSize {
		d.sticky = fmt.Errorf("transport: read frame: invalid read count %d", n)
		return 0, d.sticky
	}
	got := min(n, len(p))
	d.end = n - got
	d.body -= got
	if err != nil {
		if got > 0 || d.end > 0 {
			d.rerr = err
		} else {
			return 0, d.readError(err, d.need-d.body, d.need)
		}
	}
	if n == 0 && err == nil {
		d.empty++
		if d.empty >= maxEmptyReads {
			return 0, fmt.Errorf("transport: read frame: %w", io.ErrNoProgress)
		}
	} else {
		d.empty = 0
	}
	return got, nil
}

// fill reads once into the staging buffer (it may return with fewer
// bytes than the caller needs; callers loop). It is called with fewer than
// a header buffered, or with nothing buffered and a small rest of a body
// to come.
func (d *DirectReader) fill() error {
	if err := d.rerr; err != nil {
		d.rerr = nil
		avail := d.end - d.start
		if d.body > 0 {
			return d.readError(err, d.need-d.body+avail, d.need)
		}
		return d.readError(err, avail, HeaderSize)
	}
	if d.start > 0 { // fewer than a header or a small rest is buffered
		d.end = copy(d.buf, d.buf[d.start:d.end])
		d.start = 0
	}
	limit := len(d.buf)
	if d.large && d.body == 0 {
		// After a large frame, a frame boundary where the stream paused:
		// fetch just the next header, so that a large body that follows
		// goes straight to its destination, not through this buffer.
		limit = HeaderSize
	}
	d.iov[0], d.iov[1] = d.buf[d.end:limit], nil
	n, err := d.r.ReadVec(d.iov[:1])
	d.iov[0] = nil
	if n < 0 || n > limit-d.end {
		d.sticky = fmt.Errorf("transport: read frame: invalid read count %d", n)
		return d.sticky
	}
	d.end += n
	if err != nil {
		d.rerr = err
		if n == 0 {
			return d.fill()
		}
		return nil
	}
	if n == 0 {
		d.empty++
		if d.empty >= maxEmptyReads {
			return fmt.Errorf("transport: read frame: %w", io.ErrNoProgress)
		}
		return nil
	}
	d.empty = 0
	return nil
}

func (d *DirectReader) compact() {
	if d.start == d.end {
		d.start, d.end = 0, 0
	}
}

func (d *DirectReader) check(off int64, size int32) error {
	var s error
	switch {
	case size < 0:
		s = ErrNegativeSize
	case int64(size) > int64(d.maxBody):
		s = ErrFrameTooLarge
	case off < 0:
		s = ErrNegativeOffset
	default:
		return nil
	}
	d.herr = HeaderError{Err: s, Offset: off, Size: size, MaxBody: d.maxBody}
	d.sticky = &d.herr
	return d.sticky
}

func (d *DirectReader) readError(err error, have, need int) error {
	if errors.Is(err, io.EOF) {
		if have == 0 && d.body == 0 {
			d.sticky = io.EOF
			return io.EOF
		}
		d.sticky = fmt.Errorf("%w (%d of %d bytes of a frame): %w", ErrTruncated, have, need, io.ErrUnexpectedEOF)
		return d.sticky
	}
	if err == ErrWouldBlock {
		return err // not a failure: the caller acts while idle, then reads again (no allocation)
	}
	return fmt.Errorf("transport: read frame: %w", err)
}
