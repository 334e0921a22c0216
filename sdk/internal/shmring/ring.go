package shmring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Sizes of the layout (see the package doc).
const (
	HeaderSize  = 4096
	EntryHeader = 16
	MinData     = 64 << 10
	MaxData     = 256 << 20
	MaxErr      = 512
	version     = 1
)

// Entry kinds.
const (
	KindAppendAt = 1
	kindWrap     = 2
)

// Header field offsets.
const (
	offMagic    = 0
	offVersion  = 8
	offHdrSize  = 12
	offDataSize = 16
	offHead     = 64
	offTail     = 128
	offSleeping = 192
	offWaiting  = 256
	offFailed   = 320
	offErrLen   = 324
	offErr      = 328
)

var magic = [8]byte{'R', 'P', 'L', 'R', 'I', 'N', 'G', '1'}

var (
	// ErrCorrupt: a value of the peer's in the ring is out of bounds (a
	// peer that does not speak the layout, or memory overwritten).
	ErrCorrupt = errors.New("shmring: corrupt ring")
	// ErrUnsupported: this platform has no shared-memory ring (the side
	// channel carries the bytes instead).
	ErrUnsupported = errors.New("shmring: not supported on this platform")
)

var ne = binary.NativeEndian

// Ring is one side's handle on a ring: a producer's (Create) or a
// consumer's (Attach). One goroutine at a time uses it, except for the
// flag methods, which are atomic.
type Ring struct {
	mem   []byte // the whole mapping
	data  []byte // mem[HeaderSize:]
	size  uint64
	unmap func() error

	// producer
	head  uint64 // published
	rpos  uint64 // the reserved entry's position
	rskip uint64 // the gap before it (a wrap), 0 if none
	rn    int    // its length; 0: nothing reserved

	// consumer
	tail uint64 // consumed
	cur  uint64 // bytes of the entry Next returned, moved over by Consume
}

func (r *Ring) u64(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&r.mem[off])) }
func (r *Ring) u32(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&r.mem[off])) }

func pad8(n uint64) uint64 { return (n + 7) &^ 7 }

// newProducer lays a fresh ring over mem (HeaderSize + a data size that is
// a multiple of 8) and returns the producer's handle.
func newProducer(mem []byte, unmap func() error) *Ring {
	size := uint64(len(mem) - HeaderSize)
	clear(mem[:HeaderSize])
	copy(mem[offMagic:], magic[:])
	ne.PutUint32(mem[offVersion:], version)
	ne.PutUint32(mem[offHdrSize:], HeaderSize)
	ne.PutUint64(mem[offDataSize:], size)
	ne.PutUint32(mem[offSleeping:], 1) // the consumer starts waiting for a doorbell
	return &Ring{mem: mem, data: mem[HeaderSize:], size: size, unmap: unmap}
}

// attach checks the header of the ring in mem (the whole mapping) and
// returns the consumer's handle.
func attach(mem []byte, unmap func() error) (*Ring, error) {
	if len(mem) < HeaderSize+MinData || len(mem) > HeaderSize+MaxData {
		return nil, fmt.Errorf("%w: %d bytes mapped, want %d to %d", ErrCorrupt, len(mem), HeaderSize+MinData, HeaderSize+MaxData)
	}
	if [8]byte(mem[offMagic:offMagic+8]) != magic {
		return nil, fmt.Errorf("%w: bad magic", ErrCorrupt)
	}
	if v := ne.Uint32(mem[offVersion:]); v != version {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrCorrupt, v, version)
	}
	if h := ne.Uint32(mem[offHdrSize:]); h != HeaderSize {
		return nil, fmt.Errorf("%w: header of %d bytes, want %d", ErrCorrupt, h, HeaderSize)
	}
	size := ne.Uint64(mem[offDataSize:])
	if size != uint64(len(mem)-HeaderSize) || size%8 != 0 {
		return nil, fmt.Errorf("%w: data size %d in a mapping of %d bytes", ErrCorrupt, size, len(mem))
	}
	r := &Ring{mem: mem, data: mem[HeaderSize:], size: size, unmap: unmap}
	r.tail = r.u64(offTail).Load()
	if r.tail%8 != 0 {
		return nil, fmt.Errorf("%w: tail %d", ErrCorrupt, r.tail)
	}
	return r, nil
}

// Close unmaps the ring. No slice of it may be used afterwards.
func (r *Ring) Close() error {
	if r.unmap == nil {
		return nil
	}
	u := r.unmap
	r.unmap, r.mem, r.data = nil, nil, nil
	return u()
}

// DataSize is the size of the data area.
func (r *Ring) DataSize() int { return int(r.size) }

// MaxEntry is the largest entry Reserve takes (half the data area less a
// header, so that one always fits after a wrap).
func (r *Ring) MaxEntry() int { return int(r.size/2) - EntryHeader }

// unconsumed is head - tail as the producer sees it, checked: the tail is
// the consumer's.
func (r *Ring) unconsumed() (uint64, error) {
	t := r.u64(offTail).Load()
	if t > r.head || r.head-t > r.size || t%8 != 0 {
		return 0, fmt.Errorf("%w: tail %d with head %d in %d bytes", ErrCorrupt, t, r.head, r.size)
	}
	return r.head - t, nil
}

// Unconsumed is how many published bytes the consumer has not consumed
// yet (producer).
func (r *Ring) Unconsumed() (uint64, error) { return r.unconsumed() }

// Reserve returns room for an entry of n bytes (1 <= n <= MaxEntry) for
// the producer to fill; Publish makes it visible. ok=false: not enough
// room until the consumer moves on. A second Reserve replaces the first.
func (r *Ring) Reserve(n int) (room []byte, ok bool, err error) {
	if n <= 0 || n > r.MaxEntry() {
		return nil, false, fmt.Errorf("shmring: entry of %d bytes, limit %d", n, r.MaxEntry())
	}
	used, err := r.unconsumed()
	if err != nil {
		return nil, false, err
	}
	pos := r.head % r.size
	need := EntryHeader + pad8(uint64(n))
	skip := uint64(0)
	if r.size-pos < need {
		skip, pos = r.size-pos, 0
	}
	if used+skip+need > r.size {
		return nil, false, nil
	}
	r.rpos, r.rskip, r.rn = pos, skip, n
	return r.data[pos+EntryHeader : pos+EntryHeader+uint64(n) : pos+EntryHeader+uint64(n)], true, nil
}

// Publish makes the reserved entry, filled, visible to the consumer as an
// append at the log offset off.
func (r *Ring) Publish(off int64) {
	if r.rn == 0 {
		return
	}
	if r.rskip >= EntryHeader {
		w := r.data[r.head%r.size:]
		ne.PutUint64(w, 0)
		ne.PutUint32(w[8:], 0)
		ne.PutUint32(w[12:], kindWrap)
	}
	e := r.data[r.rpos:]
	ne.PutUint64(e, uint64(off))
	ne.PutUint32(e[8:], uint32(r.rn))
	ne.PutUint32(e[12:], KindAppendAt)
	r.head += r.rskip + EntryHeader + pad8(uint64(r.rn))
	r.rn = 0
	r.u64(offHead).Store(r.head) // the entry's bytes are written before head moves
}

// TakeSleeping reports whether the consumer said it is about to sleep, and
// clears the flag (producer): the caller then rings the doorbell, once.
func (r *Ring) TakeSleeping() bool { return r.u32(offSleeping).CompareAndSwap(1, 0) }

// SetWaiting asks the consumer for a notification once at most max bytes
// are unconsumed (producer). ClearWaiting withdraws it.
func (r *Ring) SetWaiting(max uint64) { r.u64(offWaiting).Store(max + 1) }

// ClearWaiting withdraws SetWaiting.
func (r *Ring) ClearWaiting() { r.u64(offWaiting).Store(0) }

// Failure is the consumer's error, if it stopped (producer): at most
// MaxErr bytes whatever the header says, opaque to the ring.
func (r *Ring) Failure() (detail []byte, failed bool) {
	if r.u32(offFailed).Load() == 0 {
		return nil, false
	}
	n := min(ne.Uint32(r.mem[offErrLen:]), MaxErr)
	return append([]byte(nil), r.mem[offErr:offErr+n]...), true
}

// head loads the producer's head (consumer), checked against the tail.
func (r *Ring) loadHead() (uint64, error) {
	h := r.u64(offHead).Load()
	if h < r.tail || h-r.tail > r.size || h%8 != 0 {
		return 0, fmt.Errorf("%w: head %d with tail %d in %d bytes", ErrCorrupt, h, r.tail, r.size)
	}
	return h, nil
}

// Pending reports whether published entries wait to be consumed (consumer).
func (r *Ring) Pending() (bool, error) {
	h, err := r.loadHead()
	return h != r.tail, err
}

// Next returns the next published entry (consumer): an append of data at
// the log offset off. data points into the ring, valid until Consume.
// ok=false: nothing published. Gaps are skipped (consumed) on the way.
func (r *Ring) Next() (off int64, data []byte, ok bool, err error) {
	r.cur = 0
	for {
		h, err := r.loadHead()
		if err != nil {
			return 0, nil, false, err
		}
		avail := h - r.tail
		if avail == 0 {
			return 0, nil, false, nil
		}
		pos := r.tail % r.size
		left := r.size - pos
		if left < EntryHeader {
			if avail < left {
				return 0, nil, false, fmt.Errorf("%w: a gap of %d bytes at %d, %d published", ErrCorrupt, left, pos, avail)
			}
			r.skip(left)
			continue
		}
		if avail < EntryHeader {
			return 0, nil, false, fmt.Errorf("%w: %d bytes published at %d, less than an entry header", ErrCorrupt, avail, pos)
		}
		e := r.data[pos : pos+EntryHeader]
		o, n, kind := int64(ne.Uint64(e)), uint64(ne.Uint32(e[8:])), ne.Uint32(e[12:])
		switch kind {
		case kindWrap:
			if avail < left {
				return 0, nil, false, fmt.Errorf("%w: a wrap at %d, %d published", ErrCorrupt, pos, avail)
			}
			r.skip(left)
			continue
		case KindAppendAt:
		default:
			return 0, nil, false, fmt.Errorf("%w: entry kind %d at %d", ErrCorrupt, kind, pos)
		}
		need := EntryHeader + pad8(n)
		if n == 0 || need > left || need > avail || o < 0 {
			return 0, nil, false, fmt.Errorf("%w: entry at %d: offset %d, %d bytes, %d to the end, %d published", ErrCorrupt, pos, o, n, left, avail)
		}
		r.cur = need
		start := pos + EntryHeader
		return o, r.data[start : start+n : start+n], true, nil
	}
}

func (r *Ring) skip(n uint64) {
	r.tail += n
	r.u64(offTail).Store(r.tail)
}

// Consume marks the entry Next returned as applied (consumer): its room
// goes back to the producer.
func (r *Ring) Consume() {
	if r.cur > 0 {
		r.skip(r.cur)
		r.cur = 0
	}
}

// Sleep says the consumer is about to wait for a doorbell (consumer). The
// caller then checks Pending once more: if entries arrived meanwhile, it
// calls Awake and goes on instead of waiting (the producer may have rung
// anyway: a doorbell with nothing new is harmless).
func (r *Ring) Sleep() { r.u32(offSleeping).Store(1) }

// Awake withdraws Sleep (consumer).
func (r *Ring) Awake() { r.u32(offSleeping).CompareAndSwap(1, 0) }

// NotifyWanted reports whether the producer waits for what the consumer
// has consumed so far (SetWaiting) and clears its request (consumer): the
// caller then notifies it, once.
func (r *Ring) NotifyWanted() bool {
	w := r.u64(offWaiting).Load()
	if w == 0 {
		return false
	}
	h := r.u64(offHead).Load()
	if h >= r.tail && h-r.tail > w-1 {
		return false
	}
	return r.u64(offWaiting).CompareAndSwap(w, 0)
}

// Fail records the consumer's error (it applies nothing more): detail is
// opaque to the ring, cut at MaxErr bytes.
func (r *Ring) Fail(detail []byte) {
	detail = detail[:min(len(detail), MaxErr)]
	ne.PutUint32(r.mem[offErrLen:], uint32(len(detail)))
	copy(r.mem[offErr:offErr+MaxErr], detail)
	r.u32(offFailed).Store(1)
}
