package transport

import (
	"errors"
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
	s       bodyStream // staging and body streaming, shared with AutoSwitchDirectReader
	maxBody int
	sticky  error
	herr    HeaderError
}

// NewDirectReader returns a DirectReader on r accepting bodies of at most
// maxBody bytes (<= 0 or above MaxBodyLimit: MaxBodyLimit).
func NewDirectReader(r VectorReader, maxBody int) *DirectReader {
	if maxBody <= 0 || maxBody > MaxBodyLimit {
		maxBody = MaxBodyLimit
	}
	d := &DirectReader{maxBody: maxBody}
	d.s = newBodyStream(r, HeaderSize, "frame", "frame", &d.sticky)
	return d
}

// MaxBody is the largest body this reader accepts.
func (d *DirectReader) MaxBody() int { return d.maxBody }

// Buffered is the number of bytes read from the stream and not yet handed
// out (headers parsed but not returned count too).
func (d *DirectReader) Buffered() int { return len(d.s.staged()) }

// Remaining is the number of body bytes of the current frame not yet read.
func (d *DirectReader) Remaining() int { return d.s.body }

// Next returns the next frame's header, validated, blocking until its 12
// bytes are buffered. The body (Size bytes) must then be read with Read
// before the next call: calling Next with body bytes pending returns
// ErrBodyPending.
func (d *DirectReader) Next() (Header, error) {
	if d.sticky != nil {
		return Header{}, d.sticky
	}
	if d.s.body > 0 {
		return Header{}, ErrBodyPending
	}
	d.s.need = HeaderSize
	for len(d.s.staged()) < HeaderSize {
		if err := d.s.fill(); err != nil {
			return Header{}, err
		}
	}
	off, size := ParseHeader(d.s.staged())
	if err := checkHeader(off, size, d.maxBody, &d.herr, &d.sticky); err != nil {
		return Header{}, err
	}
	d.s.startBody(HeaderSize, int(size), HeaderSize+int(size))
	return Header{Offset: off, Size: int(size)}, nil
}

// ErrBodyPending: DirectReader.Next was called before the previous frame's
// body was read.
var ErrBodyPending = errors.New("transport: frame body not read")

// Read reads the current frame's body into p: at most the body bytes still
// to come, io.EOF once the whole body was read. Buffered bytes are copied
// first; then the stream is read into p directly, together with up to a
// header of the next frame.
func (d *DirectReader) Read(p []byte) (int, error) { return d.s.read(p) }

// checkHeader validates a classic frame header (FrameReader and
// DirectReader): a violation is recorded in herr and made sticky.
func checkHeader(off int64, size int32, maxBody int, herr *HeaderError, sticky *error) error {
	var s error
	switch {
	case size < 0:
		s = ErrNegativeSize
	case int64(size) > int64(maxBody):
		s = ErrFrameTooLarge
	case off < 0:
		s = ErrNegativeOffset
	default:
		return nil
	}
	*herr = HeaderError{Err: s, Offset: off, Size: size, MaxBody: maxBody}
	*sticky = herr
	return herr
}
