package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// ReportError describes a rejected slave report. Err is ErrNegativeOffset. A
// ReportReader keeps its ReportError inside itself, so returning one does not
// allocate.
type ReportError struct {
	Err    error // the sentinel
	Value  int64 // the offending value
	Stream int64 // its position in the stream (bytes from the start)
}

func (e *ReportError) Error() string {
	return e.Err.Error() + ": report " + strconv.FormatInt(e.Value, 10) +
		" at stream byte " + strconv.FormatInt(e.Stream, 10)
}

// Unwrap returns the sentinel.
func (e *ReportError) Unwrap() error { return e.Err }

// PutReport writes one report into b[:ReportSize]. It panics if
// len(b) < ReportSize.
func PutReport(b []byte, offset int64) { binary.BigEndian.PutUint64(b[:ReportSize], uint64(offset)) }

// ParseReport reads one report from b[:ReportSize] without validating it.
func ParseReport(b []byte) int64 { return int64(binary.BigEndian.Uint64(b[:ReportSize])) }

// ReportReader parses slave->master reports: bare 8-byte big-endian offsets.
// It applies RocketMQ's master reader rule: each underlying Read that
// completes at least one value yields only the LAST complete value of that
// read; earlier values in the same read are superseded (but still
// validated). Values are aligned on 8-byte boundaries counted from the start
// of the stream, across reads. It is not safe for concurrent use; Next
// allocates nothing on the success path.
//
// Errors from Next:
//   - io.EOF, bare: the stream ended cleanly on a value boundary.
//   - an error matching ErrTruncated and io.ErrUnexpectedEOF (not io.EOF):
//     the stream ended inside a value.
//   - a *ReportError matching ErrNegativeOffset: a negative value, protocol
//     violation. Sticky.
//   - any other error is the underlying Read's, wrapped ("transport: read
//     report: ..."). A partial value is kept, so after a deadline error Next
//     may be called again.
type ReportReader struct {
	r      io.Reader
	buf    [ReportReadBufferSize]byte
	part   [ReportSize]byte // bytes of an incomplete value carried to the next read
	npart  int
	total  int64 // bytes read from the stream
	rerr   error
	sticky error
	rep    ReportError
}

// NewReportReader returns a ReportReader on r.
func NewReportReader(r io.Reader) *ReportReader { return &ReportReader{r: r} }

// StreamBytes is the number of bytes read from the stream so far.
func (rr *ReportReader) StreamBytes() int64 { return rr.total }

// Next blocks until one Read completes at least one value and returns the
// last value completed by that Read.
func (rr *ReportReader) Next() (int64, error) {
	if rr.sticky != nil {
		return 0, rr.sticky
	}
	empty := 0
	for {
		if err := rr.rerr; err != nil {
			rr.rerr = nil
			return 0, rr.readError(err)
		}
		n, err := rr.r.Read(rr.buf[:])
		if n < 0 || n > len(rr.buf) {
			rr.sticky = fmt.Errorf("transport: read report: invalid read count %d", n)
			return 0, rr.sticky
		}
		if err != nil {
			rr.rerr = err
		}
		if n == 0 {
			if err == nil {
				empty++
				if empty >= maxEmptyReads {
					return 0, fmt.Errorf("transport: read report: %w", io.ErrNoProgress)
				}
			}
			continue
		}
		empty = 0
		v, ok, perr := rr.consume(rr.buf[:n])
		if perr != nil {
			return 0, perr
		}
		if ok {
			return v, nil
		}
	}
}

// consume folds one read's bytes into the stream state and returns the last
// value it completed, if any.
func (rr *ReportReader) consume(p []byte) (v int64, ok bool, err error) {
	start := rr.total
	rr.total += int64(len(p))
	if rr.npart > 0 {
		c := copy(rr.part[rr.npart:], p)
		rr.npart += c
		p = p[c:]
		if rr.npart < ReportSize {
			return 0, false, nil
		}
		rr.npart = 0
		if v, ok = ParseReport(rr.part[:]), true; v < 0 {
			return 0, false, rr.reject(v, start+int64(c)-ReportSize)
		}
		start += int64(c)
	}
	whole := len(p) / ReportSize * ReportSize
	for i := 0; i < whole; i += ReportSize {
		if x := ParseReport(p[i:]); x < 0 {
			return 0, false, rr.reject(x, start+int64(i))
		}
	}
	if whole > 0 {
		v, ok = ParseReport(p[whole-ReportSize:]), true
	}
	rr.npart = copy(rr.part[:], p[whole:])
	return v, ok, nil
}

func (rr *ReportReader) reject(v, pos int64) error {
	rr.rep = ReportError{Err: ErrNegativeOffset, Value: v, Stream: pos}
	rr.sticky = &rr.rep
	return rr.sticky
}

func (rr *ReportReader) readError(err error) error {
	if errors.Is(err, io.EOF) {
		if rr.npart == 0 {
			rr.sticky = io.EOF
			return io.EOF
		}
		rr.sticky = fmt.Errorf("%w (%d of %d bytes of a report): %w", ErrTruncated, rr.npart, ReportSize, io.ErrUnexpectedEOF)
		return rr.sticky
	}
	return fmt.Errorf("transport: read report: %w", err)
}

// ReportWriter writes slave->master reports: the classic protocol's 8-byte
// reports, or the autoswitch protocol's 12-byte acks (NewAckWriter). It is
// not safe for concurrent use.
type ReportWriter struct {
	w   io.Writer
	ack bool
	buf [AckSize]byte
}

// NewReportWriter returns a ReportWriter of classic reports on w.
func NewReportWriter(w io.Writer) *ReportWriter { return &ReportWriter{w: w} }

// NewAckWriter returns a ReportWriter of autoswitch acks
// [TRANSFER][offset] (AppendAck) on w.
func NewAckWriter(w io.Writer) *ReportWriter { return &ReportWriter{w: w, ack: true} }

// WriteReport writes one report (8 bytes; an ack: 12) in a single Write
// without allocating.
// A negative offset returns ErrNegativeOffset before anything is written. A
// write error is wrapped; after one the connection must be closed (RocketMQ
// closes on an incomplete report write).
func (rw *ReportWriter) WriteReport(offset int64) error {
	if offset < 0 {
		return ErrNegativeOffset
	}
	b := rw.buf[:ReportSize]
	if rw.ack {
		b = AppendAck(rw.buf[:0], offset)
	} else {
		PutReport(b, offset)
	}
	if _, err := rw.w.Write(b); err != nil {
		return fmt.Errorf("transport: write report %d: %w", offset, err)
	}
	return nil
}
