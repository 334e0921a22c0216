package memstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

var _ store.Store = (*Store)(nil)

// ErrOpen is returned by Reopen on a store that is not closed.
var ErrOpen = errors.New("memstore: store is still open")

// Store is an in-memory store.Store holding RocketMQ records in segments
// of a fixed size, under the commitlog plugin's offset rules. It is safe
// for concurrent use.
type Store struct {
	mu     sync.Mutex
	l      *memLog // survives Close: Reopen hands it to a new Store
	closed bool
	watch  store.Notifier
	now    func() time.Time
}

// memLog is the log's state, which a restart (Close, Reopen) keeps, as a
// directory keeps a commit log's files.
type memLog struct {
	segSize    int64
	base       int64  // first offset held (Bounds.Min)
	data       []byte // the bytes [base, base+len(data))
	dispatched int64  // end of the whole records seen; queue offsets are known below it
	stalled    bool   // bytes at dispatched are not a record: queue offsets stop there
	queues     map[string]map[int32]int64
}

// New returns an empty store with segments of segmentSize bytes (at least
// record.MinRecordSize+record.FillerSize; smaller sizes are raised to it).
func New(segmentSize int64) *Store {
	segmentSize = max(segmentSize, record.MinRecordSize+record.FillerSize)
	return &Store{l: &memLog{segSize: segmentSize, queues: map[string]map[int32]int64{}}, now: time.Now}
}

// Reopen returns a new Store over the records of s, which must be closed:
// what a process finds when it opens a commit log's directory again after
// a clean shutdown. Watchers of s are not carried over.
func (s *Store) Reopen() (*Store, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		return nil, fmt.Errorf("memstore: reopen: %w", ErrOpen)
	}
	l := s.l
	s.l = nil
	if l == nil {
		return nil, fmt.Errorf("memstore: reopen: already reopened: %w", store.ErrClosed)
	}
	return &Store{l: l, now: s.now}, nil
}

func (l *memLog) max() int64 { return l.base + int64(len(l.data)) }

// segEnd is the end of the segment that holds offset.
func (l *memLog) segEnd(offset int64) int64 { return (offset/l.segSize + 1) * l.segSize }

// at returns the stored bytes [from, to).
func (l *memLog) at(from, to int64) []byte { return l.data[from-l.base : to-l.base : to-l.base] }

func mapRecordErr(err error) error {
	switch {
	case errors.Is(err, record.ErrInvalidTopic):
		return fmt.Errorf("memstore: append: %w: %w", store.ErrInvalidTopic, err)
	case errors.Is(err, record.ErrTooLarge):
		return fmt.Errorf("memstore: append: %w: %w", store.ErrMessageTooLarge, err)
	}
	return fmt.Errorf("memstore: append: %w", err)
}

// Append encodes msg as a record at the max offset (see store.Store). A
// record that does not fit the rest of the segment with room for an
// end-of-file filler goes to the next segment, after the filler. A log
// that ends inside a partial record (a replica mid-transfer) refuses it
// with store.ErrOffsetMismatch.
func (s *Store) Append(ctx context.Context, msg *record.Message) (store.AppendResult, error) {
	if err := ctx.Err(); err != nil {
		return store.AppendResult{}, fmt.Errorf("memstore: append: %w", err)
	}
	size, err := record.Size(msg)
	if err != nil {
		return store.AppendResult{}, mapRecordErr(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.AppendResult{}, fmt.Errorf("memstore: append: %w", store.ErrClosed)
	}
	l := s.l
	if limit := l.segSize - record.FillerSize; int64(size) > limit {
		return store.AppendResult{}, fmt.Errorf("memstore: append: %w: record of %d bytes, limit %d", store.ErrMessageTooLarge, size, limit)
	}
	off := l.max()
	if l.dispatched != off {
		return store.AppendResult{}, fmt.Errorf("memstore: append: %w: the log ends inside a partial record at %d (max %d)", store.ErrOffsetMismatch, l.dispatched, off)
	}
	if rest := l.segEnd(off) - off; int64(size)+record.FillerSize > rest {
		pad := make([]byte, rest)
		if rest >= record.FillerSize {
			record.PutFiller(pad, int32(rest))
		}
		l.data = append(l.data, pad...)
		off += rest
	}
	ts := s.now().UnixMilli()
	qs := l.queues[msg.Topic]
	qo := qs[msg.QueueID]
	if l.data, err = record.Encode(l.data, msg, qo, off, ts); err != nil {
		l.data = l.data[:off-l.base]
		return store.AppendResult{}, mapRecordErr(err)
	}
	if qs == nil {
		qs = map[int32]int64{}
		l.queues[msg.Topic] = qs
	}
	qs[msg.QueueID] = qo + 1
	next := off + int64(size)
	l.dispatched = next
	s.watch.Notify()
	return store.AppendResult{Offset: off, NextOffset: next, QueueOffset: qo, StoreTimestamp: ts, Size: int32(size)}, nil
}

// AppendAt writes raw bytes at the max offset (see store.Store). On an
// empty log, offset may instead be any segment boundary: the log restarts
// there (a new slave starting at its master's last segment).
func (s *Store) AppendAt(offset int64, data []byte) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, fmt.Errorf("memstore: append at %d: %w", offset, store.ErrClosed)
	}
	l := s.l
	if mx := l.max(); offset != mx {
		if len(l.data) != 0 || offset < 0 || offset%l.segSize != 0 {
			return mx, fmt.Errorf("memstore: append at %d: %w: max offset is %d", offset, store.ErrOffsetMismatch, mx)
		}
		l.base, l.dispatched, l.stalled = offset, offset, false
	}
	if offset%l.segSize+int64(len(data)) > l.segSize {
		return l.max(), fmt.Errorf("memstore: append at %d: %w: %d bytes, %d left in the segment", offset, store.ErrSegmentOverflow, len(data), l.segEnd(offset)-offset)
	}
	if len(data) == 0 {
		return offset, nil
	}
	l.data = append(l.data, data...)
	l.dispatch()
	s.watch.Notify()
	return l.max(), nil
}

// dispatch advances dispatched over the whole records that AppendAt
// completed, keeping the queue offsets current (mu held).
func (l *memLog) dispatch() {
	mx := l.max()
	for l.dispatched < mx && !l.stalled {
		end := l.segEnd(l.dispatched)
		if end-l.dispatched < record.FillerSize {
			if mx < end {
				return
			}
			l.dispatched = end
			continue
		}
		info, err := record.VerifyHeader(l.at(l.dispatched, min(mx, end)))
		if errors.Is(err, record.ErrShort) {
			return
		}
		if err == nil && info.Filler && int64(info.Size) != end-l.dispatched {
			err = fmt.Errorf("filler of %d bytes with %d left", info.Size, end-l.dispatched)
		}
		if err != nil {
			l.stalled = true
			return
		}
		if info.Filler {
			if mx < end {
				return
			}
			l.dispatched = end
			continue
		}
		l.setQueue(string(info.Topic), info.QueueID, info.QueueOffset+1)
		l.dispatched += int64(info.Size)
	}
}

func (l *memLog) setQueue(topic string, queue int32, next int64) {
	qs := l.queues[topic]
	if qs == nil {
		qs = map[int32]int64{}
		l.queues[topic] = qs
	}
	qs[queue] = next
}

func (s *Store) rangeErr(op string, offset int64) error {
	return fmt.Errorf("memstore: %s at %d: %w: log holds [%d, %d]", op, offset, store.ErrOffsetOutOfRange, s.l.base, s.l.max())
}

// Read returns a view of at most max bytes from offset, never crossing a
// segment end (see store.Store). The view aliases the store's memory: a
// later Truncate does not change the bytes of a view taken before it.
func (s *Store) Read(offset int64, max int) (store.View, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.View{}, fmt.Errorf("memstore: read: %w", store.ErrClosed)
	}
	l := s.l
	mx := l.max()
	if offset < l.base || offset > mx {
		return store.View{}, s.rangeErr("read", offset)
	}
	if offset == mx || max <= 0 {
		return store.View{Offset: offset}, nil
	}
	end := min(offset+int64(max), l.segEnd(offset), mx)
	return store.View{Offset: offset, Data: l.at(offset, end)}, nil
}

// ReadMessages decodes up to n records from offset, a record boundary,
// skipping end-of-file fillers (see store.Store). It stops early at the
// max offset or at a partial record. A first position that is not a
// record gives store.ErrNotBoundary; a later record that does not verify
// gives store.ErrCorrupt.
func (s *Store) ReadMessages(offset int64, n int) ([]record.Record, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, offset, fmt.Errorf("memstore: read messages: %w", store.ErrClosed)
	}
	l := s.l
	mx := l.max()
	if offset < l.base || offset > mx {
		return nil, offset, s.rangeErr("read messages", offset)
	}
	var out []record.Record
	for len(out) < n && offset < mx {
		end := l.segEnd(offset)
		if end-offset < record.FillerSize {
			if mx < end {
				break
			}
			offset = end
			continue
		}
		rec, err := record.Decode(l.at(offset, min(mx, end)))
		switch {
		case errors.Is(err, record.ErrFiller):
			if int64(rec.TotalSize) != end-offset {
				err = fmt.Errorf("filler of %d bytes with %d left", rec.TotalSize, end-offset)
				break
			}
			if mx < end {
				return out, offset, nil
			}
			offset = end
			continue
		case errors.Is(err, record.ErrShort):
			return out, offset, nil
		case err == nil && rec.PhysicalOffset != offset:
			err = fmt.Errorf("PHYSICALOFFSET %d", rec.PhysicalOffset)
		}
		if err != nil {
			if len(out) == 0 {
				return nil, offset, fmt.Errorf("memstore: read messages at %d: %w: %w", offset, store.ErrNotBoundary, err)
			}
			return out, offset, fmt.Errorf("memstore: read messages at %d: %w: %w", offset, store.ErrCorrupt, err)
		}
		out = append(out, rec)
		offset += int64(rec.TotalSize)
	}
	return out, offset, nil
}

// Bounds reports the offsets and geometry (see store.Store). Everything
// stored counts as flushed.
func (s *Store) Bounds() store.Bounds {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.l
	if l == nil {
		return store.Bounds{}
	}
	mx := l.max()
	last := l.base - l.base%l.segSize
	if mx > l.base {
		last = (mx - 1) / l.segSize * l.segSize // the segment holding the last byte
	}
	return store.Bounds{Min: l.base, Max: mx, Flushed: mx, LastSegmentStart: last, SegmentSize: l.segSize}
}

// Truncate cuts the log back to offset, a record boundary in [min, max]
// (see store.Store): a segment start, the end of the last whole record, or
// where a record verifies. The queue offsets go back with it.
func (s *Store) Truncate(offset int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("memstore: truncate: %w", store.ErrClosed)
	}
	l := s.l
	mx := l.max()
	if offset == mx {
		return nil
	}
	if offset < l.base || offset > mx {
		return s.rangeErr("truncate", offset)
	}
	if offset != l.base && offset%l.segSize != 0 && offset != l.dispatched {
		info, err := record.Verify(l.at(offset, min(mx, l.segEnd(offset))))
		if err == nil && !info.Filler && info.PhysicalOffset != offset {
			err = fmt.Errorf("PHYSICALOFFSET %d", info.PhysicalOffset)
		}
		if err != nil {
			return fmt.Errorf("memstore: truncate to %d: %w: %w", offset, store.ErrNotBoundary, err)
		}
	}
	if offset < l.dispatched {
		if err := l.rewindQueues(offset); err != nil {
			return err
		}
		l.dispatched = offset
	}
	// A copy: views taken before keep their bytes, appends after it
	// never write where a view reads.
	l.data = bytes.Clone(l.data[:offset-l.base])
	l.stalled = false
	l.dispatch()
	s.watch.Notify()
	return nil
}

// rewindQueues sets each queue that has a record in [offset, dispatched)
// back to the queue offset of its first record there (mu held).
func (l *memLog) rewindQueues(offset int64) error {
	type queue struct {
		topic string
		id    int32
	}
	seen := map[queue]bool{}
	for pos := offset; pos < l.dispatched; {
		end := l.segEnd(pos)
		if end-pos < record.FillerSize {
			pos = end
			continue
		}
		info, err := record.VerifyHeader(l.at(pos, min(l.max(), end)))
		if err != nil {
			return fmt.Errorf("memstore: truncate to %d: record at %d: %w: %w", offset, pos, store.ErrCorrupt, err)
		}
		if info.Filler {
			pos = end
			continue
		}
		if q := (queue{string(info.Topic), info.QueueID}); !seen[q] {
			seen[q] = true // its first record at or after offset
			l.setQueue(q.topic, q.id, info.QueueOffset)
		}
		pos += int64(info.Size)
	}
	return nil
}

// Watch registers ch for a non-blocking send whenever the max offset
// changes (see store.Store).
func (s *Store) Watch(ch chan<- struct{}) (cancel func()) { return s.watch.Watch(ch) }

// Close closes the store; later calls fail with store.ErrClosed. The
// records stay for Reopen.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("memstore: close: %w", store.ErrClosed)
	}
	s.closed = true
	return nil
}

// Grow makes room for n more bytes and touches that memory, so that
// appends up to then neither copy the log nor fault pages in (a
// prefaulting store, for benchmarks of what lies around the store).
func (s *Store) Grow(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || n <= 0 {
		return
	}
	l := s.l
	buf := make([]byte, len(l.data), len(l.data)+n)
	copy(buf, l.data)
	clear(buf[len(buf):cap(buf)])
	l.data = buf
}

// DeleteSegmentsBefore drops the segments that end at or below offset,
// never the one that holds the max offset, as a commit log's retention
// deletes old segment files, and returns the new min offset. Watchers are
// not woken: the max offset does not change.
func (s *Store) DeleteSegmentsBefore(offset int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, fmt.Errorf("memstore: delete segments: %w", store.ErrClosed)
	}
	l := s.l
	mx := l.max()
	if mx == l.base {
		return l.base, nil
	}
	cut := min(offset-offset%l.segSize, (mx-1)/l.segSize*l.segSize)
	if cut <= l.base {
		return l.base, nil
	}
	l.data = bytes.Clone(l.data[cut-l.base:])
	l.base = cut
	if l.dispatched < cut {
		l.dispatched, l.stalled = cut, false
		l.dispatch()
	}
	return cut, nil
}
