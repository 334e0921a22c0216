package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// HAState is RocketMQ 5's HAConnectionState ordinal, the first field of
// every frame of the controller-mode ("AutoSwitch") protocol, both ways.
type HAState int32

// HAConnectionState ordinals. Part of the wire format; never change them.
const (
	StateReady     HAState = 0
	StateHandshake HAState = 1
	StateTransfer  HAState = 2
	StateSuspend   HAState = 3
	StateShutdown  HAState = 4
)

// String returns RocketMQ's name of the state ("HANDSHAKE"), or
// "HAState(n)" for an ordinal outside the enumeration.
func (s HAState) String() string {
	switch s {
	case StateReady:
		return "READY"
	case StateHandshake:
		return "HANDSHAKE"
	case StateTransfer:
		return "TRANSFER"
	case StateSuspend:
		return "SUSPEND"
	case StateShutdown:
		return "SHUTDOWN"
	}
	return "HAState(" + strconv.FormatInt(int64(s), 10) + ")"
}

// Wire constants of the AutoSwitch protocol (see doc.go). Never change them.
const (
	// SlaveHandshakeSize is the slave->master handshake:
	// [state i32 = 1][syncFromLastFile i16][asyncLearner i16][brokerId i64].
	SlaveHandshakeSize = 16
	// AckSize is one slave->master ack: [state i32 = 2][maxOffset i64].
	AckSize = 12
	// MasterHandshakeHeaderSize is the master->slave handshake header:
	// [state i32 = 1][bodySize i32 = 12N][maxOffset i64][lastEpoch i32].
	MasterHandshakeHeaderSize = 20
	// EpochEntrySize is one epoch entry of the master handshake body:
	// [epoch i32][startOffset i64].
	EpochEntrySize = 12
	// TransferHeaderSize is the master->slave transfer header:
	// [state i32 = 2][bodySize i32][offset i64][epoch i32]
	// [epochStartOffset i64][confirmOffset i64].
	TransferHeaderSize = 36
	// MaxHandshakeEpochs is the most epoch entries a master handshake may
	// carry: RocketMQ's master encodes them into a 12 000-byte buffer.
	MaxHandshakeEpochs = 1000
	// MaxMasterHandshakeSize is the largest master handshake frame.
	MaxMasterHandshakeSize = MasterHandshakeHeaderSize + EpochEntrySize*MaxHandshakeEpochs
	// MaxTransferBodyLimit is the largest transfer body: a Java slave reads
	// into a 4 MiB buffer that must hold the header and the body.
	MaxTransferBodyLimit = 4<<20 - TransferHeaderSize
	// slaveFrameBufferSize is the SlaveFrameReader buffer.
	slaveFrameBufferSize = 4 << 10
)

// Sentinel errors of the AutoSwitch codec, returned inside a *FrameError
// (with ErrFrameTooLarge, ErrNegativeSize and ErrNegativeOffset) and checked
// with errors.Is. All of them mean the peer broke the protocol: close the
// connection.
var (
	// ErrBadState: a frame's state field is not one this direction carries
	// (HANDSHAKE or TRANSFER). An 8-byte classic report read as a state is
	// one.
	ErrBadState = errors.New("transport: bad HA state")
	// ErrTooManyEpochs: a master handshake announces, or is asked to carry,
	// more than MaxHandshakeEpochs entries.
	ErrTooManyEpochs = errors.New("transport: too many epoch entries")
	// ErrBadHandshake: a master handshake's bodySize is not a multiple of
	// EpochEntrySize.
	ErrBadHandshake = errors.New("transport: malformed master handshake")
)

// FrameError describes a rejected AutoSwitch frame. Err is the sentinel
// (ErrBadState, ErrTooManyEpochs, ErrBadHandshake, ErrFrameTooLarge,
// ErrNegativeSize or ErrNegativeOffset); Field names the offending field and
// Value holds it. A reader keeps its FrameError inside itself, so returning
// one does not allocate.
type FrameError struct {
	Err    error   // the sentinel
	State  HAState // the frame's state field
	Field  string  // "state", "bodySize", "maxOffset", "offset", ...
	Value  int64   // the offending value
	Limit  int64   // the bound it broke, when there is one
	Stream int64   // stream position of the frame's first byte
}

func (e *FrameError) Error() string {
	s := e.Err.Error() + ": " + e.State.String() + " frame at stream byte " +
		strconv.FormatInt(e.Stream, 10) + ": " + e.Field + " " + strconv.FormatInt(e.Value, 10)
	if e.Limit != 0 {
		s += " limit " + strconv.FormatInt(e.Limit, 10)
	}
	return s
}

// Unwrap returns the sentinel.
func (e *FrameError) Unwrap() error { return e.Err }

// EpochEntry is one entry of a master handshake: an epoch and the commit-log
// offset where it starts.
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

// SlaveHandshake is the slave->master handshake.
type SlaveHandshake struct {
	SyncFromLastFile bool  // an empty slave starts at the master's last segment
	AsyncLearner     bool  // never joins the in-sync set
	BrokerID         int64 // the slave's broker id
}

// MasterHandshake is the master->slave handshake.
type MasterHandshake struct {
	MaxOffset int64        // the master's commit-log max offset
	LastEpoch int32        // the master's last epoch
	Epochs    []EpochEntry // ascending epochs; at most MaxHandshakeEpochs
}

// TransferHeader is the 36-byte header of a master->slave TRANSFER frame.
// Size 0 is a heartbeat, whose Offset is the master's next transfer offset.
type TransferHeader struct {
	Offset           int64 // commit-log offset of the first body byte
	Size             int32 // body bytes
	Epoch            int32 // epoch the body belongs to
	EpochStartOffset int64 // start offset of that epoch
	ConfirmOffset    int64 // the master's confirm offset
}

// End is the offset just after the frame's body.
func (h TransferHeader) End() int64 { return h.Offset + int64(h.Size) }

func putBool16(b []byte, v bool) {
	var x uint16
	if v {
		x = 1
	}
	binary.BigEndian.PutUint16(b, x)
}

// AppendSlaveHandshake appends the 16-byte slave handshake to b.
func AppendSlaveHandshake(b []byte, h SlaveHandshake) []byte {
	var f [SlaveHandshakeSize]byte
	binary.BigEndian.PutUint32(f[0:], uint32(StateHandshake))
	putBool16(f[4:], h.SyncFromLastFile)
	putBool16(f[6:], h.AsyncLearner)
	binary.BigEndian.PutUint64(f[8:], uint64(h.BrokerID))
	return append(b, f[:]...)
}

// AppendAck appends the 12-byte ack [TRANSFER][offset] to b.
func AppendAck(b []byte, offset int64) []byte {
	var f [AckSize]byte
	binary.BigEndian.PutUint32(f[0:], uint32(StateTransfer))
	binary.BigEndian.PutUint64(f[4:], uint64(offset))
	return append(b, f[:]...)
}

// AppendMasterHandshake appends the master handshake (20-byte header and
// 12 bytes per epoch entry) to b. More than MaxHandshakeEpochs entries
// return ErrTooManyEpochs (RocketMQ's master would overflow its buffer);
// a negative MaxOffset or StartOffset returns ErrNegativeOffset. Nothing is
// appended on error.
func AppendMasterHandshake(b []byte, h MasterHandshake) ([]byte, error) {
	if len(h.Epochs) > MaxHandshakeEpochs {
		return b, fmt.Errorf("transport: master handshake with %d epoch entries (limit %d): %w",
			len(h.Epochs), MaxHandshakeEpochs, ErrTooManyEpochs)
	}
	if h.MaxOffset < 0 {
		return b, fmt.Errorf("transport: master handshake max offset %d: %w", h.MaxOffset, ErrNegativeOffset)
	}
	for _, e := range h.Epochs {
		if e.StartOffset < 0 {
			return b, fmt.Errorf("transport: master handshake epoch %d start offset %d: %w",
				e.Epoch, e.StartOffset, ErrNegativeOffset)
		}
	}
	var f [MasterHandshakeHeaderSize]byte
	binary.BigEndian.PutUint32(f[0:], uint32(StateHandshake))
	binary.BigEndian.PutUint32(f[4:], uint32(EpochEntrySize*len(h.Epochs)))
	binary.BigEndian.PutUint64(f[8:], uint64(h.MaxOffset))
	binary.BigEndian.PutUint32(f[16:], uint32(h.LastEpoch))
	b = append(b, f[:]...)
	var e [EpochEntrySize]byte
	for _, x := range h.Epochs {
		binary.BigEndian.PutUint32(e[0:], uint32(x.Epoch))
		binary.BigEndian.PutUint64(e[4:], uint64(x.StartOffset))
		b = append(b, e[:]...)
	}
	return b, nil
}

// PutTransferHeader writes the 36-byte transfer header into
// b[:TransferHeaderSize]. It panics if len(b) < TransferHeaderSize, like
// encoding/binary. It does not validate h.
func PutTransferHeader(b []byte, h TransferHeader) {
	_ = b[TransferHeaderSize-1]
	binary.BigEndian.PutUint32(b[0:], uint32(StateTransfer))
	binary.BigEndian.PutUint32(b[4:], uint32(h.Size))
	binary.BigEndian.PutUint64(b[8:], uint64(h.Offset))
	binary.BigEndian.PutUint32(b[16:], uint32(h.Epoch))
	binary.BigEndian.PutUint64(b[20:], uint64(h.EpochStartOffset))
	binary.BigEndian.PutUint64(b[28:], uint64(h.ConfirmOffset))
}

// ParseTransferHeader reads a transfer header from b[:TransferHeaderSize]
// without validating it (the state field is not looked at). It panics if
// len(b) < TransferHeaderSize.
func ParseTransferHeader(b []byte) TransferHeader {
	_ = b[TransferHeaderSize-1]
	return TransferHeader{
		Size:             int32(binary.BigEndian.Uint32(b[4:])),
		Offset:           int64(binary.BigEndian.Uint64(b[8:])),
		Epoch:            int32(binary.BigEndian.Uint32(b[16:])),
		EpochStartOffset: int64(binary.BigEndian.Uint64(b[20:])),
		ConfirmOffset:    int64(binary.BigEndian.Uint64(b[28:])),
	}
}

// stateAt reads the state field at b[0:4].
func stateAt(b []byte) HAState { return HAState(int32(binary.BigEndian.Uint32(b))) }

// SlaveFrame is one slave->master frame: a handshake (State ==
// StateHandshake, Handshake set) or an ack (State == StateTransfer, Offset
// set: the slave's max offset).
type SlaveFrame struct {
	State     HAState
	Handshake SlaveHandshake
	Offset    int64
}

// SlaveFrameReader parses slave->master frames (16-byte handshakes and
// 12-byte acks) on the master side, from a stream split at any byte. Every
// frame is returned (unlike the classic ReportReader, no value is
// superseded). A flag of the handshake is true when its i16 is 1, as
// RocketMQ's master reads it. It is not safe for concurrent use; Next
// allocates nothing.
//
// Errors from Next:
//   - io.EOF, bare: the stream ended cleanly between frames.
//   - an error matching ErrTruncated and io.ErrUnexpectedEOF: the stream
//     ended inside a frame.
//   - a *FrameError matching ErrBadState (a state other than HANDSHAKE or
//     TRANSFER, reported as soon as its 4 bytes arrive) or
//     ErrNegativeOffset (a negative ack). Sticky.
//   - ErrWouldBlock (from an armed ConnReader) is returned as it is; any
//     other error is the underlying Read's, wrapped ("transport: read
//     slave frame: ..."). Buffered bytes are kept, so Next may be called
//     again after either (a deadline error, for example).
type SlaveFrameReader struct {
	r      io.Reader
	buf    [slaveFrameBufferSize]byte
	start  int
	end    int
	pos    int64 // stream position of buf[start]
	rerr   error
	sticky error
	ferr   FrameError
}

// NewSlaveFrameReader returns a SlaveFrameReader on r.
func NewSlaveFrameReader(r io.Reader) *SlaveFrameReader { return &SlaveFrameReader{r: r} }

// StreamBytes is the number of bytes consumed as frames so far.
func (sr *SlaveFrameReader) StreamBytes() int64 { return sr.pos }

// Next returns the next frame, blocking until it is wholly buffered.
func (sr *SlaveFrameReader) Next() (SlaveFrame, error) {
	if sr.sticky != nil {
		return SlaveFrame{}, sr.sticky
	}
	empty := 0
	for {
		avail := sr.end - sr.start
		need := 4
		if avail >= 4 {
			b := sr.buf[sr.start:sr.end]
			st := stateAt(b)
			switch st {
			case StateHandshake:
				need = SlaveHandshakeSize
			case StateTransfer:
				need = AckSize
			default:
				return SlaveFrame{}, sr.reject(ErrBadState, st, "state", int64(st))
			}
			if avail >= need {
				f := SlaveFrame{State: st}
				if st == StateHandshake {
					f.Handshake = SlaveHandshake{
						SyncFromLastFile: binary.BigEndian.Uint16(b[4:]) == 1,
						AsyncLearner:     binary.BigEndian.Uint16(b[6:]) == 1,
						BrokerID:         int64(binary.BigEndian.Uint64(b[8:])),
					}
				} else if f.Offset = int64(binary.BigEndian.Uint64(b[4:])); f.Offset < 0 {
					return SlaveFrame{}, sr.reject(ErrNegativeOffset, st, "offset", f.Offset)
				}
				sr.start += need
				sr.pos += int64(need)
				if sr.start == sr.end {
					sr.start, sr.end = 0, 0
				}
				return f, nil
			}
		}
		if err := sr.rerr; err != nil {
			sr.rerr = nil
			return SlaveFrame{}, sr.readError(err, avail, need)
		}
		if len(sr.buf)-sr.start < SlaveHandshakeSize {
			sr.end = copy(sr.buf[:], sr.buf[sr.start:sr.end])
			sr.start = 0
		}
		n, err := sr.r.Read(sr.buf[sr.end:])
		if n < 0 || n > len(sr.buf)-sr.end {
			sr.sticky = fmt.Errorf("transport: read slave frame: invalid read count %d", n)
			return SlaveFrame{}, sr.sticky
		}
		sr.end += n
		if err != nil {
			sr.rerr = err
			continue
		}
		if n == 0 {
			if empty++; empty >= maxEmptyReads {
				return SlaveFrame{}, fmt.Errorf("transport: read slave frame: %w", io.ErrNoProgress)
			}
			continue
		}
		empty = 0
	}
}

func (sr *SlaveFrameReader) reject(s error, st HAState, field string, v int64) error {
	sr.ferr = FrameError{Err: s, State: st, Field: field, Value: v, Stream: sr.pos}
	sr.sticky = &sr.ferr
	return sr.sticky
}

func (sr *SlaveFrameReader) readError(err error, avail, need int) error {
	return readFailure(&sr.sticky, err, avail, need, "slave frame", "slave frame")
}

// MasterFrame is one master->slave frame: a handshake (State ==
// StateHandshake, Handshake set) or a transfer frame (State ==
// StateTransfer, Transfer set, Body its Transfer.Size bytes; empty for a
// heartbeat). Body and Handshake.Epochs alias the reader's buffers and are
// valid until the next call to Next.
type MasterFrame struct {
	State     HAState
	Handshake MasterHandshake
	Transfer  TransferHeader
	Body      []byte
}

// masterParser holds the validation and decoding shared by MasterFrameReader
// and AutoSwitchDirectReader.
type masterParser struct {
	maxBody int
	pos     int64          // stream position of the next frame's first byte
	th      TransferHeader // the last transfer header validated by header
	epochs  []EpochEntry
	sticky  error
	ferr    FrameError
}

func (p *masterParser) reject(s error, st HAState, field string, v, limit int64) error {
	p.ferr = FrameError{Err: s, State: st, Field: field, Value: v, Limit: limit, Stream: p.pos}
	p.sticky = &p.ferr
	return p.sticky
}

// header inspects the buffered bytes b of the next frame. It returns the
// header size the frame needs (4 until the state is known), and once the
// header is there, the whole frame's size, validated. total is 0 while
// the header is incomplete.
func (p *masterParser) header(b []byte) (hsize, total int, err error) {
	if len(b) < 4 {
		return 4, 0, nil
	}
	st := stateAt(b)
	switch st {
	case StateHandshake:
		if len(b) < MasterHandshakeHeaderSize {
			return MasterHandshakeHeaderSize, 0, nil
		}
		size := int32(binary.BigEndian.Uint32(b[4:]))
		switch {
		case size < 0:
			return 0, 0, p.reject(ErrNegativeSize, st, "bodySize", int64(size), 0)
		case size%EpochEntrySize != 0:
			return 0, 0, p.reject(ErrBadHandshake, st, "bodySize", int64(size), EpochEntrySize)
		case size/EpochEntrySize > MaxHandshakeEpochs:
			return 0, 0, p.reject(ErrTooManyEpochs, st, "entries", int64(size/EpochEntrySize), MaxHandshakeEpochs)
		}
		if mo := int64(binary.BigEndian.Uint64(b[8:])); mo < 0 {
			return 0, 0, p.reject(ErrNegativeOffset, st, "maxOffset", mo, 0)
		}
		return MasterHandshakeHeaderSize, MasterHandshakeHeaderSize + int(size), nil
	case StateTransfer:
		if len(b) < TransferHeaderSize {
			return TransferHeaderSize, 0, nil
		}
		h := ParseTransferHeader(b)
		switch {
		case h.Size < 0:
			return 0, 0, p.reject(ErrNegativeSize, st, "bodySize", int64(h.Size), 0)
		case int64(h.Size) > int64(p.maxBody):
			return 0, 0, p.reject(ErrFrameTooLarge, st, "bodySize", int64(h.Size), int64(p.maxBody))
		case h.Offset < 0:
			return 0, 0, p.reject(ErrNegativeOffset, st, "offset", h.Offset, 0)
		case h.EpochStartOffset < 0:
			return 0, 0, p.reject(ErrNegativeOffset, st, "epochStartOffset", h.EpochStartOffset, 0)
		case h.ConfirmOffset < 0:
			return 0, 0, p.reject(ErrNegativeOffset, st, "confirmOffset", h.ConfirmOffset, 0)
		}
		p.th = h
		return TransferHeaderSize, TransferHeaderSize + int(h.Size), nil
	}
	return 0, 0, p.reject(ErrBadState, st, "state", int64(st), 0)
}

// handshake decodes a whole, header-validated master handshake frame b.
func (p *masterParser) handshake(b []byte) (MasterHandshake, error) {
	n := (len(b) - MasterHandshakeHeaderSize) / EpochEntrySize
	if cap(p.epochs) < n {
		p.epochs = make([]EpochEntry, n, max(n, 16))
	}
	es := p.epochs[:n]
	for i := range es {
		e := b[MasterHandshakeHeaderSize+i*EpochEntrySize:]
		es[i] = EpochEntry{Epoch: int32(binary.BigEndian.Uint32(e)), StartOffset: int64(binary.BigEndian.Uint64(e[4:]))}
		if es[i].StartOffset < 0 {
			return MasterHandshake{}, p.reject(ErrNegativeOffset, StateHandshake, "epoch "+strconv.Itoa(int(es[i].Epoch))+" startOffset",
				es[i].StartOffset, 0)
		}
	}
	return MasterHandshake{
		MaxOffset: int64(binary.BigEndian.Uint64(b[8:])),
		LastEpoch: int32(binary.BigEndian.Uint32(b[16:])),
		Epochs:    es[:n:n],
	}, nil
}

func (p *masterParser) readError(err error, avail, need int, what string) error {
	return readFailure(&p.sticky, err, avail, need, what, "master frame")
}

func normalizeTransferMaxBody(maxBody int) int {
	if maxBody <= 0 || maxBody > MaxTransferBodyLimit {
		return MaxTransferBodyLimit
	}
	return maxBody
}

// MasterFrameReader parses master->slave frames (handshakes and transfer
// frames) on the slave side, from a stream split at any byte. Each header
// is validated as soon as it is buffered, before its body is awaited: a
// bad state (ErrBadState), a handshake bodySize that is negative
// (ErrNegativeSize), not a multiple of 12 (ErrBadHandshake) or above
// MaxHandshakeEpochs entries (ErrTooManyEpochs), a transfer bodySize that is
// negative or above maxBody (ErrFrameTooLarge), and any negative offset
// (ErrNegativeOffset) are refused without allocating; those errors are
// sticky *FrameError values. End of stream and read errors are as
// FrameReader's (ErrWouldBlock is returned unwrapped, not sticky). Its buffer is allocated once; the epoch list of a handshake
// is allocated at most once per size (bounded by MaxHandshakeEpochs). It is
// not safe for concurrent use.
type MasterFrameReader struct {
	r      io.Reader
	buf    []byte
	start  int
	end    int
	window int
	rerr   error
	p      masterParser
}

// NewMasterFrameReader returns a MasterFrameReader on r accepting transfer
// bodies of at most maxBody bytes (<= 0 or above MaxTransferBodyLimit:
// MaxTransferBodyLimit). Its buffer is DefaultReadBufferSize (4 MiB, as
// RocketMQ's AutoSwitch slave).
func NewMasterFrameReader(r io.Reader, maxBody int) *MasterFrameReader {
	return newMasterFrameReaderSize(r, maxBody, DefaultReadBufferSize)
}

// newMasterFrameReaderSize is NewMasterFrameReader with a buffer of bufSize
// bytes, raised to the largest frame accepted if smaller.
func newMasterFrameReaderSize(r io.Reader, maxBody, bufSize int) *MasterFrameReader {
	maxBody = normalizeTransferMaxBody(maxBody)
	bufSize = max(bufSize, TransferHeaderSize+maxBody, MaxMasterHandshakeSize)
	return &MasterFrameReader{r: r, buf: make([]byte, bufSize), window: min(bufSize, readWindow),
		p: masterParser{maxBody: maxBody}}
}

// MaxBody is the largest transfer body this reader accepts.
func (mr *MasterFrameReader) MaxBody() int { return mr.p.maxBody }

// StreamBytes is the number of bytes returned as frames so far.
func (mr *MasterFrameReader) StreamBytes() int64 { return mr.p.pos }

// Buffered is the number of bytes read from the stream but not yet returned
// as frames.
func (mr *MasterFrameReader) Buffered() int { return mr.end - mr.start }

// Next returns the next frame, blocking until it is wholly buffered.
func (mr *MasterFrameReader) Next() (MasterFrame, error) {
	if mr.p.sticky != nil {
		return MasterFrame{}, mr.p.sticky
	}
	empty := 0
	for {
		avail := mr.end - mr.start
		hsize, total, err := mr.p.header(mr.buf[mr.start:mr.end])
		if err != nil {
			return MasterFrame{}, err
		}
		need := hsize
		if total > 0 {
			need = total
			if avail >= total {
				return mr.frame(total)
			}
		}
		if err := mr.rerr; err != nil {
			mr.rerr = nil
			return MasterFrame{}, mr.p.readError(err, avail, need, "master frame")
		}
		limit := min(len(mr.buf), max(mr.window, 2*need))
		if mr.start+need > limit {
			copy(mr.buf, mr.buf[mr.start:mr.end])
			mr.start, mr.end = 0, avail
		}
		n, err := mr.r.Read(mr.buf[mr.end:limit])
		if n < 0 || n > limit-mr.end {
			mr.p.sticky = fmt.Errorf("transport: read master frame: invalid read count %d", n)
			return MasterFrame{}, mr.p.sticky
		}
		mr.end += n
		if err != nil {
			mr.rerr = err
			continue
		}
		if n == 0 {
			if empty++; empty >= maxEmptyReads {
				return MasterFrame{}, fmt.Errorf("transport: read master frame: %w", io.ErrNoProgress)
			}
			continue
		}
		empty = 0
	}
}

// frame consumes the validated, wholly buffered frame of total bytes.
func (mr *MasterFrameReader) frame(total int) (MasterFrame, error) {
	b := mr.buf[mr.start : mr.start+total : mr.start+total]
	f := MasterFrame{State: stateAt(b)}
	if f.State == StateHandshake {
		h, err := mr.p.handshake(b)
		if err != nil {
			return MasterFrame{}, err
		}
		f.Handshake = h
	} else {
		f.Transfer = mr.p.th
		f.Body = b[TransferHeaderSize:]
	}
	mr.start += total
	mr.p.pos += int64(total)
	if mr.start == mr.end {
		mr.start, mr.end = 0, 0
	}
	return f, nil
}
