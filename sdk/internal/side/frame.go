package side

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"google.golang.org/protobuf/proto"
)

// FrameVersion names this frame layout in the calls that set up a channel
// (the store kind's AppendChannel and ReadChannel): version 0 was one
// length-prefixed protobuf message per frame, payloads inside it.
const FrameVersion = 2

// FrameHeader is the fixed part of a frame: the length, the message's
// length and the number of parts.
const FrameHeader = 12

// MaxParts bounds the parts of one frame (a batch's ops, an ack's results).
const MaxParts = 1 << 16

// ErrFrameTooLarge: a frame's length is above the connection's bound.
var ErrFrameTooLarge = errors.New("plugin: side channel frame too large")

// ErrBadFrame: a frame's lengths do not add up (a peer that does not speak
// the format, or a corrupted stream).
var ErrBadFrame = errors.New("plugin: malformed side channel frame")

// FrameConn reads and writes frames (a small protobuf message and raw
// parts, see the package doc) on one side channel connection. One
// goroutine writes, one reads.
type FrameConn struct {
	c        *net.UnixConn
	r        *bufio.Reader
	writev   func([][]byte) error // every byte of the slices, in order (sockIO)
	maxFrame int
	wbuf     []byte        // the queued frames' headers, part lengths and messages
	queued   []queuedFrame // frames waiting for Flush, in order
	qparts   [][]byte      // their parts, in order
	iov      [][]byte
	rbuf     []byte // header, part lengths and message of the last frame
	pbuf     []byte // payload of the last frame (ReadShared)
	parts    [][]byte
}

// queuedFrame is one frame waiting for Flush: wbuf[start:end], then the
// next parts of qparts.
type queuedFrame struct{ start, end, parts int }

// sockBuffer is asked for as the socket's send and receive buffers: a
// 256 KiB batch or chunk then goes in one write and one read instead of
// waking the peer once per default-sized (208 KiB) buffer. The kernel caps
// it at net.core.[rw]mem_max.
const sockBuffer = 1 << 20

// NewFrameConn frames messages on c; frames above maxFrame bytes are
// refused in both directions.
func NewFrameConn(c *net.UnixConn, maxFrame int) *FrameConn {
	_ = c.SetReadBuffer(sockBuffer)  // best effort: the default works, slower
	_ = c.SetWriteBuffer(sockBuffer) // likewise
	r, w := sockIO(c)
	return &FrameConn{c: c, r: bufio.NewReaderSize(r, 64<<10), writev: w, maxFrame: maxFrame}
}

// netWritev writes vectors to c with net.Buffers (one writev per IOV_MAX
// slices, through the runtime's system call path).
func netWritev(c *net.UnixConn) func([][]byte) error {
	return func(bufs [][]byte) error {
		b := net.Buffers(bufs)
		_, err := b.WriteTo(c)
		return err
	}
}

// NewFrameReader returns a FrameConn that only reads, from r (tests and
// fuzzing).
func NewFrameReader(r io.Reader, maxFrame int) *FrameConn {
	return &FrameConn{r: bufio.NewReader(r), maxFrame: maxFrame}
}

// AppendFrame appends the frame of m and parts to dst: the header, the
// part lengths and m; the parts themselves follow it on the wire (Write
// sends them without copying). total is the frame's length field.
func appendFrame(dst []byte, m proto.Message, parts [][]byte) (out []byte, total uint64, err error) {
	if len(parts) > MaxParts {
		return dst, 0, fmt.Errorf("%w: %d parts, limit %d", ErrBadFrame, len(parts), MaxParts)
	}
	start := len(dst)
	dst = append(dst, make([]byte, FrameHeader+4*len(parts))...)
	var sum uint64
	for i, p := range parts {
		binary.BigEndian.PutUint32(dst[start+FrameHeader+4*i:], uint32(len(p)))
		sum += uint64(len(p))
	}
	before := len(dst)
	dst, err = proto.MarshalOptions{}.MarshalAppend(dst, m)
	if err != nil {
		return dst[:start], 0, fmt.Errorf("side channel: %w", err)
	}
	mlen := len(dst) - before
	total = uint64(FrameHeader-4) + 4*uint64(len(parts)) + uint64(mlen) + sum
	binary.BigEndian.PutUint32(dst[start:], uint32(min(total, 1<<32-1)))
	binary.BigEndian.PutUint32(dst[start+4:], uint32(mlen))
	binary.BigEndian.PutUint32(dst[start+8:], uint32(len(parts)))
	return dst, total, nil
}

// AppendFrame appends the encoded frame of m and parts to dst (tests and
// fuzzing: Write sends the same bytes).
func AppendFrame(dst []byte, m proto.Message, parts [][]byte) ([]byte, error) {
	out, _, err := appendFrame(dst, m, parts)
	if err != nil {
		return dst, err
	}
	for _, p := range parts {
		out = append(out, p...)
	}
	return out, nil
}

// Write sends m with no parts.
func (f *FrameConn) Write(m proto.Message) error { return f.WriteParts(m, nil) }

// WriteParts sends m and parts as one frame with one writev: the parts'
// bytes go from the caller's slices to the socket, never through the
// message encoder. On Linux the reads and writes are raw system calls on
// the poller's non-blocking descriptor (rawio_linux.go). Frames queued
// with QueueParts go first, in the same writev.
func (f *FrameConn) WriteParts(m proto.Message, parts [][]byte) error {
	if err := f.QueueParts(m, parts); err != nil {
		return err
	}
	return f.Flush()
}

// QueueParts encodes the frame of m and parts for the next Flush (or
// WriteParts), which sends every queued frame with one writev. The parts'
// bytes are not copied: the caller keeps them unchanged until then. A
// frame that fails (too large, too many parts) is not queued.
func (f *FrameConn) QueueParts(m proto.Message, parts [][]byte) error {
	start := len(f.wbuf)
	buf, total, err := appendFrame(f.wbuf, m, parts)
	if err != nil {
		return err
	}
	if total > uint64(f.maxFrame) {
		f.wbuf = buf[:start]
		return fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, total)
	}
	f.wbuf = buf
	f.queued = append(f.queued, queuedFrame{start: start, end: len(buf), parts: len(parts)})
	f.qparts = append(f.qparts, parts...)
	return nil
}

// Queued reports how many frames wait for Flush.
func (f *FrameConn) Queued() int { return len(f.queued) }

// Flush sends the queued frames with one writev (IOV_MAX slices at a time)
// and forgets them, sent or not.
func (f *FrameConn) Flush() error {
	if len(f.queued) == 0 {
		return nil
	}
	iov := f.iov[:0]
	p := f.qparts
	for _, q := range f.queued {
		iov = append(iov, f.wbuf[q.start:q.end])
		for _, b := range p[:q.parts] {
			if len(b) > 0 {
				iov = append(iov, b)
			}
		}
		p = p[q.parts:]
	}
	f.iov = iov
	err := f.writev(iov) // may consume its argument's slices
	clear(f.iov)
	clear(f.qparts)
	f.wbuf, f.queued, f.qparts = f.wbuf[:0], f.queued[:0], f.qparts[:0]
	if err != nil {
		return fmt.Errorf("side channel: %w", err)
	}
	return nil
}

// Buffered reports whether the next frame has begun to arrive: bytes are
// buffered on the reading side, so a Read now returns as soon as the peer
// has finished writing that frame (a writer never stops inside a frame).
func (f *FrameConn) Buffered() bool { return f.r.Buffered() > 0 }

// Read receives one frame into m; its parts are ignored.
func (f *FrameConn) Read(m proto.Message) error {
	_, err := f.ReadShared(m)
	return err
}

// ReadShared receives one frame into m and returns its parts, which point
// into a buffer the next read reuses.
func (f *FrameConn) ReadShared(m proto.Message) ([][]byte, error) {
	return f.read(m, nil)
}

// ReadOwned receives one frame into m and returns its parts in a buffer of
// their own, which the caller keeps.
func (f *FrameConn) ReadOwned(m proto.Message) ([][]byte, error) {
	return f.read(m, func(n int) []byte { return make([]byte, n) })
}

// ReadInto is ReadOwned with the parts in a buffer from alloc, asked for
// the frame's payload length (already checked against the bound) once the
// frame's lengths add up; it returns at least that many bytes (a buffer
// from a pool the caller keeps).
func (f *FrameConn) ReadInto(m proto.Message, alloc func(n int) []byte) ([][]byte, error) {
	return f.read(m, alloc)
}

// read reads one frame: every length is checked against the frame's
// length, and that against the bound, before anything is allocated. The
// payload goes into a buffer from alloc (nil: pbuf, reused). io.EOF means
// the peer ended the stream cleanly on a frame boundary.
func (f *FrameConn) read(m proto.Message, alloc func(n int) []byte) ([][]byte, error) {
	owned := alloc != nil
	var h [FrameHeader]byte
	if _, err := io.ReadFull(f.r, h[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("side channel: %w", io.ErrUnexpectedEOF)
	}
	total := uint64(binary.BigEndian.Uint32(h[0:]))
	mlen := uint64(binary.BigEndian.Uint32(h[4:]))
	n := uint64(binary.BigEndian.Uint32(h[8:]))
	if total > uint64(f.maxFrame) {
		return nil, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, total)
	}
	rest := total - (FrameHeader - 4) // part lengths, message, payload
	if total < FrameHeader-4 || n > MaxParts || 4*n+mlen > rest {
		return nil, fmt.Errorf("%w: length %d, message %d, %d parts", ErrBadFrame, total, mlen, n)
	}
	meta := int(4*n + mlen)
	if cap(f.rbuf) < meta {
		f.rbuf = make([]byte, meta)
	}
	b := f.rbuf[:meta]
	if _, err := io.ReadFull(f.r, b); err != nil {
		return nil, fmt.Errorf("side channel: %w", io.ErrUnexpectedEOF)
	}
	payload := rest - uint64(meta)
	var sum uint64
	for i := range n {
		sum += uint64(binary.BigEndian.Uint32(b[4*i:]))
	}
	if sum != payload {
		return nil, fmt.Errorf("%w: parts of %d bytes in a payload of %d", ErrBadFrame, sum, payload)
	}
	if err := proto.Unmarshal(b[4*n:], m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadFrame, err)
	}
	var p []byte
	switch {
	case payload == 0:
	case owned:
		p = alloc(int(payload))[:payload]
	default:
		if uint64(cap(f.pbuf)) < payload {
			f.pbuf = make([]byte, payload)
		}
		p = f.pbuf[:payload]
	}
	if payload > 0 {
		if _, err := io.ReadFull(f.r, p); err != nil {
			return nil, fmt.Errorf("side channel: %w", io.ErrUnexpectedEOF)
		}
	}
	parts := f.parts[:0]
	if owned {
		parts = make([][]byte, 0, n)
	}
	off := 0
	for i := range n {
		l := int(binary.BigEndian.Uint32(b[4*i:]))
		parts = append(parts, p[off:off+l:off+l])
		off += l
	}
	if !owned {
		f.parts = parts
	}
	return parts, nil
}

// BufferCap is the capacity of the read buffers (fuzzing checks the bound).
func (f *FrameConn) BufferCap() int { return cap(f.rbuf) + cap(f.pbuf) }

// CloseWrite half-closes the connection: the peer's Read returns io.EOF.
func (f *FrameConn) CloseWrite() error { return f.c.CloseWrite() }

// Close closes the connection.
func (f *FrameConn) Close() error { return f.c.Close() }
