package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Wire constants of RocketMQ's classic HA protocol. They are part of the wire
// format; never change them.
const (
	// HeaderSize is the master->slave frame header: [offset int64][size int32].
	HeaderSize = 12
	// ReportSize is one slave->master report: [maxOffset int64].
	ReportSize = 8
	// DefaultBatchSize is RocketMQ's haTransferBatchSize: the default largest
	// body a master puts in one frame.
	DefaultBatchSize = 32 << 10
	// MaxBodyLimit is the largest body any frame may carry: a Java slave reads
	// into a 4 MiB buffer, so it can never parse a larger frame.
	MaxBodyLimit = 4<<20 - HeaderSize
	// DefaultReadBufferSize is the FrameReader buffer size, RocketMQ's slave
	// read buffer (4 MiB).
	DefaultReadBufferSize = 4 << 20
	// ReportReadBufferSize is the ReportReader buffer size. A multiple of
	// ReportSize.
	ReportReadBufferSize = 4 << 10
)

// Sentinel errors. They are returned inside a *HeaderError (frames) or a
// *ReportError (reports) carrying the offending values; check them with
// errors.Is. All three mean the peer broke the protocol: close the
// connection.
var (
	// ErrFrameTooLarge: a frame's size field exceeds the reader's maxBody, or
	// WriteFrame was given a body larger than MaxBodyLimit.
	ErrFrameTooLarge = errors.New("transport: frame too large")
	// ErrNegativeSize: a frame's size field is negative.
	ErrNegativeSize = errors.New("transport: negative frame size")
	// ErrNegativeOffset: a frame offset or a report value is negative.
	ErrNegativeOffset = errors.New("transport: negative offset")
	// ErrTruncated: the stream ended (io.EOF) inside a frame or a report. The
	// returned error also matches io.ErrUnexpectedEOF, never io.EOF: io.EOF
	// alone (bare) means the peer closed cleanly on a frame boundary.
	ErrTruncated = errors.New("transport: stream ended mid-frame")
)

// HeaderError describes a rejected frame header. Err is one of
// ErrFrameTooLarge, ErrNegativeSize or ErrNegativeOffset. A FrameReader keeps
// its HeaderError inside itself, so returning one does not allocate.
type HeaderError struct {
	Err     error // the sentinel
	Offset  int64 // the header's offset field
	Size    int32 // the header's size field
	MaxBody int   // the reader's limit
}

func (e *HeaderError) Error() string {
	return e.Err.Error() + ": offset " + strconv.FormatInt(e.Offset, 10) +
		" size " + strconv.FormatInt(int64(e.Size), 10) +
		" limit " + strconv.Itoa(e.MaxBody)
}

// Unwrap returns the sentinel.
func (e *HeaderError) Unwrap() error { return e.Err }

// PutHeader writes a frame header into b[:HeaderSize]. It panics if
// len(b) < HeaderSize, like encoding/binary.
func PutHeader(b []byte, offset int64, size int32) {
	_ = b[HeaderSize-1]
	binary.BigEndian.PutUint64(b[0:8], uint64(offset))
	binary.BigEndian.PutUint32(b[8:12], uint32(size))
}

// ParseHeader reads a frame header from b[:HeaderSize] without validating it.
// It panics if len(b) < HeaderSize.
func ParseHeader(b []byte) (offset int64, size int32) {
	_ = b[HeaderSize-1]
	return int64(binary.BigEndian.Uint64(b[0:8])), int32(binary.BigEndian.Uint32(b[8:12]))
}

// AppendFrame appends the encoding of one frame (header and body) to dst.
func AppendFrame(dst []byte, offset int64, body []byte) []byte {
	var h [HeaderSize]byte
	PutHeader(h[:], offset, int32(len(body)))
	return append(append(dst, h[:]...), body...)
}

// Frame is one master->slave frame. An empty Body is a heartbeat, whose
// Offset is the master's next transfer offset for this slave.
type Frame struct {
	Offset int64
	Body   []byte
}

// IsHeartbeat reports whether f carries no data.
func (f Frame) IsHeartbeat() bool { return len(f.Body) == 0 }

// End is the offset just after the frame's body.
func (f Frame) End() int64 { return f.Offset + int64(len(f.Body)) }

// maxEmptyReads bounds consecutive (0, nil) reads before io.ErrNoProgress.
const maxEmptyReads = 100

// FrameReader parses master->slave frames from a byte stream that may be
// split at any byte. It is not safe for concurrent use.
//
// Its buffer is allocated once, in the constructor; Next allocates nothing
// on the success path and nothing for a rejected header. A header is
// validated before its body is awaited, so a bad size field is reported as
// soon as its 12 bytes arrive.
//
// Errors from Next:
//   - io.EOF, bare: the stream ended cleanly between frames.
//   - an error matching ErrTruncated and io.ErrUnexpectedEOF (not io.EOF):
//     the stream ended inside a frame.
//   - a *HeaderError matching ErrFrameTooLarge, ErrNegativeSize or
//     ErrNegativeOffset: protocol violation. Sticky: every later call
//     returns it again.
//   - any other error is the underlying Read's, wrapped ("transport: read
//     frame: ..."); errors.Is/As still see it (for example a net.Error
//     timeout). Buffered bytes are kept, so after a deadline error Next may
//     be called again and continues where it stopped.
type FrameReader struct {
	r       io.Reader
	buf     []byte
	start   int // first unconsumed byte
	end     int // end of buffered bytes
	maxBody int
	window  int   // bytes of buf cycled through while frames are small
	rerr    error // pending read error, returned once buffered frames are used up
	sticky  error // protocol error, returned forever
	herr    HeaderError
}

// NewFrameReader returns a FrameReader on r that accepts bodies of at most
// maxBody bytes. maxBody <= 0 or above MaxBodyLimit means MaxBodyLimit. The
// buffer is DefaultReadBufferSize (4 MiB, as RocketMQ's slave).
func NewFrameReader(r io.Reader, maxBody int) *FrameReader {
	return NewFrameReaderSize(r, maxBody, DefaultReadBufferSize)
}

// NewFrameReaderSize is NewFrameReader with a buffer of bufSize bytes,
// raised to HeaderSize+maxBody if smaller. A small buffer costs more Read
// calls; it never limits the frames accepted.
func NewFrameReaderSize(r io.Reader, maxBody, bufSize int) *FrameReader {
	if maxBody <= 0 || maxBody > MaxBodyLimit {
		maxBody = MaxBodyLimit
	}
	if bufSize < HeaderSize+maxBody {
		bufSize = HeaderSize + maxBody
	}
	window := min(bufSize, readWindow)
	return &FrameReader{r: r, buf: make([]byte, bufSize), maxBody: maxBody, window: window}
}

// readWindow is how much of a large buffer a FrameReader cycles through while
// frames are small (a frame larger than half of it widens the window to
// twice its size): reading into a cache-warm region beats streaming through
// 4 MiB, and the untouched rest of the buffer is never even paged in.
const readWindow = 256 << 10

// MaxBody is the largest body this reader accepts.
func (fr *FrameReader) MaxBody() int { return fr.maxBody }

// Buffered is the number of bytes read from the stream but not yet returned
// as frames.
func (fr *FrameReader) Buffered() int { return fr.end - fr.start }

// Next returns the next frame, blocking until it is wholly buffered. The
// returned Body aliases the reader's buffer and is valid until the next call
// to Next; copy it to keep it.
func (fr *FrameReader) Next() (Frame, error) {
	if fr.sticky != nil {
		return Frame{}, fr.sticky
	}
	empty := 0
	for {
		avail := fr.end - fr.start
		need := HeaderSize
		if avail >= HeaderSize {
			off, size := ParseHeader(fr.buf[fr.start:])
			if err := fr.check(off, size); err != nil {
				return Frame{}, err
			}
			need = HeaderSize + int(size)
			if avail >= need {
				b := fr.start + HeaderSize
				fr.start += need
				if fr.start == fr.end {
					fr.start, fr.end = 0, 0
				}
				return Frame{Offset: off, Body: fr.buf[b : b+int(size) : b+int(size)]}, nil
			}
		}
		if err := fr.rerr; err != nil {
			fr.rerr = nil
			return Frame{}, fr.readError(err, avail, need)
		}
		// Read within the window, or within twice the pending frame if that
		// is larger (a big frame then rarely needs compaction).
		limit := min(len(fr.buf), max(fr.window, 2*need))
		if fr.start+need > limit {
			copy(fr.buf, fr.buf[fr.start:fr.end])
			fr.start, fr.end = 0, avail
		}
		n, err := fr.r.Read(fr.buf[fr.end:limit])
		if n < 0 || n > limit-fr.end {
			fr.sticky = fmt.Errorf("transport: read frame: invalid read count %d", n)
			return Frame{}, fr.sticky
		}
		fr.end += n
		if err != nil {
			fr.rerr = err
			continue
		}
		if n == 0 {
			empty++
			if empty >= maxEmptyReads {
				return Frame{}, fmt.Errorf("transport: read frame: %w", io.ErrNoProgress)
			}
			continue
		}
		empty = 0
	}
}

func (fr *FrameReader) check(off int64, size int32) error {
	return checkHeader(off, size, fr.maxBody, &fr.herr, &fr.sticky)
}

func (fr *FrameReader) readError(err error, avail, need int) error {
	return readFailure(&fr.sticky, err, avail, need, "frame", "frame")
}

// FrameWriter writes master->slave frames. Each frame goes out in a single
// vectored write (net.Buffers: writev on a TCP connection), header and body
// together, without copying the body and without allocating: a FrameBatch
// of one classic frame. It is not safe for concurrent use.
type FrameWriter struct {
	w io.Writer
	b FrameBatch // the zero value: classic frames
}

// NewFrameWriter returns a FrameWriter on w.
func NewFrameWriter(w io.Writer) *FrameWriter { return &FrameWriter{w: w} }

// WriteFrame writes one frame. An empty body is a heartbeat, whose offset is
// the master's next transfer offset. A negative offset returns
// ErrNegativeOffset and a body above MaxBodyLimit returns ErrFrameTooLarge
// (wrapped), before anything is written. A write error is wrapped with the
// offset; after one the stream is in an unknown state and the connection
// must be closed.
func (fw *FrameWriter) WriteFrame(offset int64, body []byte) error {
	fw.b.Reset()
	if err := fw.b.Add(TransferHeader{Offset: offset}, body); err != nil {
		return err
	}
	if _, err := fw.b.WriteTo(fw.w); err != nil {
		return fmt.Errorf("transport: write frame at offset %d (%d bytes): %w", offset, len(body), err)
	}
	return nil
}
