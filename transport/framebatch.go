package transport

import (
	"fmt"
	"io"
	"math"
	"net"
	"runtime"
)

// MaxBatchFrames is the most frames one FrameBatch holds.
const MaxBatchFrames = 16

// FrameBatch writes master->slave frames of either protocol, several at a
// time: Add puts each frame's header (12 bytes classic, 36 bytes an
// autoswitch transfer header) in the batch's own memory next to the
// caller's body, and WriteTo sends headers and bodies in one vectored
// write, without copying a body and without allocating. On Linux with
// more than one P, a TCP connection's (*net.TCPConn, or a pointer to a
// wrapper that promotes its SyscallConn) write is writev(2) as a raw
// system call through the runtime's poller (writev_linux.go: through the
// ordinary system-call entry, the runtime's monitor thread took 11–14 %
// of a master's samples in a catch-up); any other writer (TLS, pipes,
// GOMAXPROCS 1) gets net.Buffers, a single writev on a TCP connection.
// The bytes on the wire are those of the frames written one by one. A
// master's connection gathers what the store has (catch-up, or many
// producers) into one batch per system call; a batch of one header and no
// body (a heartbeat) is one plain Write.
//
// The batch keeps the bodies until WriteTo or Reset: the caller keeps
// them valid (a store's views pinned) until then. The zero value is an
// empty batch of classic frames. It is not safe for concurrent use.
type FrameBatch struct {
	transfer bool // 36-byte transfer headers
	n        int
	hdrs     [MaxBatchFrames][TransferHeaderSize]byte
	vec      [2 * MaxBatchFrames][]byte
	bufs     net.Buffers
	raw      *rawWriter // the raw writev of the last TCP connection written
}

// NewFrameBatch returns an empty batch of classic frames, or of autoswitch
// TRANSFER frames when transfer is set.
func NewFrameBatch(transfer bool) *FrameBatch { return &FrameBatch{transfer: transfer} }

// HeaderSize is the size of each frame header the batch writes.
func (b *FrameBatch) HeaderSize() int {
	if b.transfer {
		return TransferHeaderSize
	}
	return HeaderSize
}

// Len is the number of frames in the batch.
func (b *FrameBatch) Len() int { return b.n }

// Full reports whether the batch holds MaxBatchFrames frames.
func (b *FrameBatch) Full() bool { return b.n == MaxBatchFrames }

// Add appends the frame h with body to the batch. The header's Size is
// len(body) (h.Size is ignored); a classic frame uses only h.Offset. An
// empty body is a heartbeat. A full batch, a negative offset
// (ErrNegativeOffset) or a body above the protocol's limit (MaxBodyLimit
// or MaxTransferBodyLimit: ErrFrameTooLarge) is refused and the batch is
// unchanged.
func (b *FrameBatch) Add(h TransferHeader, body []byte) error {
	if b.n == MaxBatchFrames {
		return fmt.Errorf("transport: frame batch full (%d frames)", MaxBatchFrames)
	}
	if h.Offset < 0 {
		return fmt.Errorf("transport: frame at offset %d: %w", h.Offset, ErrNegativeOffset)
	}
	limit := MaxBodyLimit
	if b.transfer {
		limit = MaxTransferBodyLimit
	}
	if len(body) > limit || len(body) > math.MaxInt32 {
		return fmt.Errorf("transport: frame at offset %d of %d bytes (limit %d): %w", h.Offset, len(body), limit, ErrFrameTooLarge)
	}
	h.Size = int32(len(body))
	hdr := b.hdrs[b.n][:]
	if b.transfer {
		PutTransferHeader(hdr, h)
	} else {
		PutHeader(hdr, h.Offset, h.Size)
	}
	b.vec[2*b.n+1] = body
	b.n++
	return nil
}

// WriteTo writes the batch's frames to w in one vectored write and empties
// the batch (also on error, after which the stream is in an unknown state
// and the connection must be closed). It returns the bytes written.
func (b *FrameBatch) WriteTo(w io.Writer) (int64, error) {
	if b.n == 0 {
		return 0, nil
	}
	hl := b.HeaderSize()
	k := 0
	for i := range b.n {
		b.vec[k] = b.hdrs[i][:hl]
		k++
		if body := b.vec[2*i+1]; len(body) > 0 {
			b.vec[k] = body
			k++
		}
	}
	var n int64
	var err error
	if k == 1 {
		var m int
		m, err = w.Write(b.vec[0])
		n = int64(m)
	} else if r := b.rawFor(w); r != nil {
		n, err = r.writev(b.vec[:k])
	} else {
		b.bufs = b.vec[:k]
		n, err = b.bufs.WriteTo(w)
	}
	b.Reset()
	return n, err
}

// rawFor returns the raw vectored writer for w, or nil for net.Buffers.
// The raw write keeps the goroutine's P for the copy: only with other Ps
// to run the rest of the program.
func (b *FrameBatch) rawFor(w io.Writer) *rawWriter {
	if runtime.GOMAXPROCS(0) < 2 {
		return nil
	}
	r := rawWriterFor(b.raw, w)
	if r != nil {
		b.raw = r
	}
	return r
}

// Reset empties the batch and drops its references to the bodies.
func (b *FrameBatch) Reset() {
	clear(b.vec[:])
	b.bufs = nil
	b.n = 0
}
