package remoting

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxFrameSize is RocketMQ's frame limit (NettyDecoder,
// com.rocketmq.remoting.frameMaxLength = 16777216): a whole frame, its
// 4-byte length field included, is at most this many bytes.
const DefaultMaxFrameSize = 16 << 20

// MinFrameSize is the smallest valid frame: the length field and the
// header-length field, with an empty header and body.
const MinFrameSize = 8

// MaxHeaderLen is the largest header length the 24-bit field can carry.
const MaxHeaderLen = 1<<24 - 1

// Flag bits (RemotingCommand RPC_TYPE and RPC_ONEWAY).
const (
	FlagResponse int32 = 1 << 0 // set on responses
	FlagOneway   int32 = 1 << 1 // set on requests that want no response
)

// SerializeType is how a frame's header is serialised: the high byte of the
// header-length field.
type SerializeType byte

// Header serialisations (SerializeType.java).
const (
	JSON     SerializeType = 0
	ROCKETMQ SerializeType = 1
)

func (t SerializeType) String() string {
	switch t {
	case JSON:
		return "JSON"
	case ROCKETMQ:
		return "ROCKETMQ"
	}
	return fmt.Sprintf("SerializeType(%d)", byte(t))
}

// Errors. They are wrapped with context; check them with errors.Is.
var (
	// ErrFrameTooLarge: a frame's length field is over the reader's bound.
	ErrFrameTooLarge = errors.New("remoting: frame too large")
	// ErrMalformed: the bytes are not a valid frame (lengths out of range,
	// an unknown serialize type, a header that does not decode).
	ErrMalformed = errors.New("remoting: malformed frame")
	// ErrInvalidCommand: a command cannot be encoded as asked (a code or
	// version outside int16 for ROCKETMQ, an unknown language for JSON, a
	// header over 16 MiB).
	ErrInvalidCommand = errors.New("remoting: command cannot be encoded")
)

// Command is one RocketMQ RemotingCommand: a request or a response.
type Command struct {
	// Code is the request code of a request, the response code of a
	// response. ROCKETMQ headers carry it as int16.
	Code int32
	// Language is the sender's LanguageCode.
	Language LanguageCode
	// Version is the sender's RocketMQ version ordinal (int16 in ROCKETMQ
	// headers).
	Version int32
	// Opaque pairs a response with its request.
	Opaque int32
	// Flag holds FlagResponse and FlagOneway.
	Flag int32
	// Remark is a free text ("" = none, RocketMQ's null).
	Remark string
	// ExtFields are the custom header's fields (nil = none; an empty map
	// decodes as nil).
	ExtFields map[string]string
	// Body is the payload (nil = none).
	Body []byte
	// Serialize is how the header is (or was) serialised.
	Serialize SerializeType
}

// IsResponse reports whether the response bit is set.
func (c *Command) IsResponse() bool { return c.Flag&FlagResponse != 0 }

// IsOneway reports whether the oneway bit is set.
func (c *Command) IsOneway() bool { return c.Flag&FlagOneway != 0 }

// NewResponse returns the response to req with code and remark: same
// opaque and serialize type, the response bit set, language Go.
func NewResponse(req *Command, code int32, remark string) *Command {
	return &Command{Code: code, Language: LanguageGo, Version: req.Version, Opaque: req.Opaque, Flag: FlagResponse, Remark: remark, Serialize: req.Serialize}
}

// AppendFrame appends the frame of c to dst:
//
//	[length i32][serialize type (1 byte) | header length (3 bytes)][header][body]
//
// length counts everything after itself. Errors wrap ErrInvalidCommand.
func AppendFrame(dst []byte, c *Command) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	var err error
	switch c.Serialize {
	case JSON:
		dst, err = appendJSONHeader(dst, c)
	case ROCKETMQ:
		dst, err = appendBinaryHeader(dst, c)
	default:
		err = fmt.Errorf("%w: serialize type %d", ErrInvalidCommand, byte(c.Serialize))
	}
	if err != nil {
		return dst[:start], err
	}
	hlen := len(dst) - start - 8
	if hlen > MaxHeaderLen {
		return dst[:start], fmt.Errorf("%w: header of %d bytes over the 24-bit limit", ErrInvalidCommand, hlen)
	}
	total := int64(len(dst)-start-4) + int64(len(c.Body))
	if total > 1<<31-1 {
		return dst[:start], fmt.Errorf("%w: frame of %d bytes", ErrInvalidCommand, total)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(total))
	binary.BigEndian.PutUint32(dst[start+4:], uint32(c.Serialize)<<24|uint32(hlen))
	return append(dst, c.Body...), nil
}

// DecodeFrame decodes one whole frame (its length field included, nothing
// after it). maxFrame bounds len(frame) (0 means DefaultMaxFrameSize). The
// Command's Body aliases frame. Errors wrap ErrMalformed or
// ErrFrameTooLarge.
func DecodeFrame(frame []byte, maxFrame int) (*Command, error) {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrameSize
	}
	if len(frame) < MinFrameSize {
		return nil, fmt.Errorf("%w: %d bytes, a frame has at least %d", ErrMalformed, len(frame), MinFrameSize)
	}
	n, err := checkLength(int32(binary.BigEndian.Uint32(frame)), maxFrame)
	if err != nil {
		return nil, err
	}
	if n != len(frame)-4 {
		return nil, fmt.Errorf("%w: length field %d, but %d bytes follow it", ErrMalformed, n, len(frame)-4)
	}
	return decodeContent(frame[4:])
}

// checkLength validates a frame's length field against maxFrame (the whole
// frame's bound) and returns it as an int.
func checkLength(n int32, maxFrame int) (int, error) {
	if n < 4 {
		return 0, fmt.Errorf("%w: length field %d, at least 4 (the header-length field)", ErrMalformed, n)
	}
	if int64(n)+4 > int64(maxFrame) {
		return 0, fmt.Errorf("%w: %d bytes, bound %d", ErrFrameTooLarge, int64(n)+4, maxFrame)
	}
	return int(n), nil
}

// decodeContent decodes what follows the length field: the header-length
// field, the header and the body.
func decodeContent(b []byte) (*Command, error) {
	info := binary.BigEndian.Uint32(b)
	st := SerializeType(info >> 24)
	hlen := int(info & MaxHeaderLen)
	if hlen > len(b)-4 {
		return nil, fmt.Errorf("%w: header length %d, but only %d bytes follow", ErrMalformed, hlen, len(b)-4)
	}
	header := b[4 : 4+hlen]
	var c *Command
	var err error
	switch st {
	case JSON:
		c, err = decodeJSONHeader(header)
	case ROCKETMQ:
		c, err = decodeBinaryHeader(header)
	default:
		return nil, fmt.Errorf("%w: unknown serialize type %d", ErrMalformed, byte(st))
	}
	if err != nil {
		return nil, err
	}
	c.Serialize = st
	if body := b[4+hlen:]; len(body) > 0 {
		c.Body = body
	}
	return c, nil
}

// Reader reads frames from a stream, bounding each before allocating.
type Reader struct {
	r        *bufio.Reader
	maxFrame int
	buf      []byte
}

// NewReader returns a Reader of r whose frames are at most maxFrame bytes
// (0 means DefaultMaxFrameSize).
func NewReader(r io.Reader, maxFrame int) *Reader {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrameSize
	}
	return &Reader{r: bufio.NewReaderSize(r, 4096), maxFrame: maxFrame}
}

// Read reads the next frame. The Command (its Body) is valid until the next
// Read. At a clean end of stream between frames it returns io.EOF; a stream
// that ends inside a frame is io.ErrUnexpectedEOF. A length over the bound
// is ErrFrameTooLarge, other bad bytes ErrMalformed; the stream is then out
// of step and must be closed.
func (r *Reader) Read() (*Command, error) {
	var lb [4]byte
	if _, err := io.ReadFull(r.r, lb[:]); err != nil {
		return nil, err
	}
	n, err := checkLength(int32(binary.BigEndian.Uint32(lb[:])), r.maxFrame)
	if err != nil {
		return nil, err
	}
	if err := r.fill(n); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	c, err := decodeContent(r.buf)
	if cap(r.buf) > 64<<10 {
		// Do not pin a large buffer for the connection's life; the Body of
		// this frame keeps it until the caller is done.
		r.buf = nil
	}
	return c, err
}

// fill reads n bytes into r.buf. Memory follows the bytes that arrive,
// not the length field: a peer that announces 16 MiB and sends nothing
// costs a small buffer, not 16 MiB.
func (r *Reader) fill(n int) error {
	if cap(r.buf) >= n {
		r.buf = r.buf[:n]
		_, err := io.ReadFull(r.r, r.buf)
		return err
	}
	b := bytes.NewBuffer(r.buf[:0])
	b.Grow(min(n, 64<<10))
	_, err := io.CopyN(b, r.r, int64(n))
	r.buf = b.Bytes()
	return err
}

// WriteCommand writes the frame of c to w in one Write.
func WriteCommand(w io.Writer, c *Command) error {
	b, err := AppendFrame(make([]byte, 0, 256+len(c.Body)), c)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
