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

// FrameHeader is the length prefix of a frame.
const FrameHeader = 4

// ErrFrameTooLarge: a frame's length is above the connection's bound.
var ErrFrameTooLarge = errors.New("plugin: side channel frame too large")

// FrameConn reads and writes length-framed protobuf messages on one side
// channel connection. One goroutine writes, one reads.
type FrameConn struct {
	c        *net.UnixConn
	r        *bufio.Reader
	maxFrame int
	wbuf     []byte
	rbuf     []byte
}

// NewFrameConn frames messages on c; frames above maxFrame bytes are
// refused in both directions.
func NewFrameConn(c *net.UnixConn, maxFrame int) *FrameConn {
	return &FrameConn{c: c, r: bufio.NewReaderSize(c, 64<<10), maxFrame: maxFrame}
}

// NewFrameReader returns a FrameConn that only reads, from r (tests and
// fuzzing).
func NewFrameReader(r io.Reader, maxFrame int) *FrameConn {
	return &FrameConn{r: bufio.NewReader(r), maxFrame: maxFrame}
}

// Write sends m as one frame with one write.
func (f *FrameConn) Write(m proto.Message) error {
	buf := append(f.wbuf[:0], 0, 0, 0, 0)
	buf, err := proto.MarshalOptions{}.MarshalAppend(buf, m)
	if err != nil {
		return fmt.Errorf("side channel: %w", err)
	}
	n := len(buf) - FrameHeader
	if n > f.maxFrame {
		return fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, n)
	}
	binary.BigEndian.PutUint32(buf, uint32(n))
	f.wbuf = buf
	if _, err := f.c.Write(buf); err != nil {
		return fmt.Errorf("side channel: %w", err)
	}
	return nil
}

// Read receives one frame into m. io.EOF means the peer ended the stream
// cleanly on a frame boundary.
func (f *FrameConn) Read(m proto.Message) error {
	var h [FrameHeader]byte
	if _, err := io.ReadFull(f.r, h[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return io.EOF
		}
		return fmt.Errorf("side channel: %w", err)
	}
	n := binary.BigEndian.Uint32(h[:])
	if uint64(n) > uint64(f.maxFrame) {
		return fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, n)
	}
	if cap(f.rbuf) < int(n) {
		f.rbuf = make([]byte, n)
	}
	b := f.rbuf[:n]
	if _, err := io.ReadFull(f.r, b); err != nil {
		return fmt.Errorf("side channel: %w", io.ErrUnexpectedEOF)
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return fmt.Errorf("side channel: %w", err)
	}
	return nil
}

// BufferCap is the capacity of the read buffer (fuzzing checks the bound).
func (f *FrameConn) BufferCap() int { return cap(f.rbuf) }

// CloseWrite half-closes the connection: the peer's Read returns io.EOF.
func (f *FrameConn) CloseWrite() error { return f.c.CloseWrite() }

// Close closes the connection.
func (f *FrameConn) Close() error { return f.c.Close() }
