package filestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// DefaultSegmentSize is used when Open gets 0.
const DefaultSegmentSize = 64 << 20

// Store is a file-backed store.Store. Safe for concurrent use.
type Store struct {
	dir     string
	segSize int64
	now     func() time.Time

	mu       sync.Mutex
	segs     []*os.File // segs[i] holds [base+i*segSize, base+(i+1)*segSize)
	base     int64      // base offset of segs[0]
	min, max int64
	flushed  int64
	scanned  int64            // queue offsets are known for records below
	queues   map[string]int64 // "topic\x00queue" -> next queue offset
	watch    store.Notifier
	closed   bool
}

var _ store.Store = (*Store)(nil)

// Open opens (or creates) the store in dir with segments of segSize bytes.
func Open(dir string, segSize int64) (*Store, error) {
	if segSize <= 0 {
		segSize = DefaultSegmentSize
	}
	if segSize < 4096 {
		return nil, fmt.Errorf("filestore: segment size %d below 4096", segSize)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	s := &Store{dir: dir, segSize: segSize, now: time.Now, queues: map[string]int64{}}
	if err := s.recover(); err != nil {
		s.closeFiles()
		return nil, err
	}
	return s, nil
}

func (s *Store) segPath(base int64) string { return filepath.Join(s.dir, store.SegmentName(base)) }

func (s *Store) recover() error {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	var bases []int64
	for _, e := range ents {
		b, ok := store.ParseSegmentName(e.Name())
		if !ok {
			continue
		}
		bases = append(bases, b)
	}
	slices.Sort(bases)
	if len(bases) == 0 {
		return nil
	}
	for i, b := range bases {
		if b%s.segSize != 0 || (i > 0 && b != bases[i-1]+s.segSize) {
			return fmt.Errorf("filestore: segment %d out of place (segment size %d): %w", b, s.segSize, store.ErrCorrupt)
		}
		f, err := os.OpenFile(s.segPath(b), os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("filestore: %w", err)
		}
		s.segs = append(s.segs, f)
	}
	s.base = bases[0]
	s.min = s.base
	if raw, err := os.ReadFile(filepath.Join(s.dir, "MIN")); err == nil {
		if m, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64); err == nil && m >= s.base && m < s.base+s.segSize {
			s.min = m
		}
	}
	// Every segment but the last is full; the last ends after its last
	// valid record.
	lastBase := s.base + int64(len(s.segs)-1)*s.segSize
	from := max(lastBase, s.min)
	end, err := s.scanValid(s.segs[len(s.segs)-1], from-lastBase)
	if err != nil {
		return err
	}
	s.max = lastBase + end
	if err := s.segs[len(s.segs)-1].Truncate(end); err != nil {
		return fmt.Errorf("filestore: cutting the torn tail: %w", err)
	}
	s.flushed, s.scanned = s.max, s.min
	return nil
}

// scanValid returns the end of the valid records of f from pos.
func (s *Store) scanValid(f *os.File, pos int64) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("filestore: %w", err)
	}
	size := fi.Size()
	hdr := make([]byte, 8)
	for pos+8 <= size {
		if _, err := f.ReadAt(hdr, pos); err != nil {
			return 0, fmt.Errorf("filestore: %w", err)
		}
		if rem, ok := record.IsFiller(hdr); ok {
			if pos+int64(rem) == s.segSize {
				return s.segSize, nil
			}
			break
		}
		n := int64(int32(binary.BigEndian.Uint32(hdr)))
		if n < record.MinRecordSize || pos+n > size {
			break
		}
		buf := make([]byte, n)
		if _, err := f.ReadAt(buf, pos); err != nil {
			return 0, fmt.Errorf("filestore: %w", err)
		}
		if _, err := record.Verify(buf); err != nil {
			break
		}
		pos += n
	}
	return pos, nil
}

func (s *Store) checkOpen() error {
	if s.closed {
		return store.ErrClosed
	}
	return nil
}

// seg returns the file holding off (base <= off < base+segSize) and its base.
func (s *Store) seg(off int64) (*os.File, int64) {
	i := (off - s.base) / s.segSize
	if off < s.base || i >= int64(len(s.segs)) {
		return nil, 0
	}
	return s.segs[i], s.base + i*s.segSize
}

// addSegment creates the segment starting at base (the next one, or the
// first of an empty log).
func (s *Store) addSegment(base int64) (*os.File, error) {
	f, err := os.OpenFile(s.segPath(base), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	if len(s.segs) == 0 {
		s.base = base
	}
	s.segs = append(s.segs, f)
	return f, nil
}

// catchUpQueues learns the queue offsets of records below max that it has
// not seen (written by AppendAt or found at Open).
func (s *Store) catchUpQueues() error {
	for s.scanned < s.max {
		f, base := s.seg(s.scanned)
		hdr := make([]byte, 8)
		if _, err := f.ReadAt(hdr, s.scanned-base); err != nil {
			return fmt.Errorf("filestore: %w", err)
		}
		if _, ok := record.IsFiller(hdr); ok {
			s.scanned = base + s.segSize
			continue
		}
		n := int64(int32(binary.BigEndian.Uint32(hdr)))
		if n < record.MinRecordSize || s.scanned+n > s.max {
			return nil // a record still arriving
		}
		buf := make([]byte, n)
		if _, err := f.ReadAt(buf, s.scanned-base); err != nil {
			return fmt.Errorf("filestore: %w", err)
		}
		info, err := record.VerifyHeader(buf)
		if err != nil {
			return fmt.Errorf("filestore: record at %d: %w (%w)", s.scanned, store.ErrCorrupt, err)
		}
		k := string(info.Topic) + "\x00" + strconv.Itoa(int(info.QueueID))
		s.queues[k] = info.QueueOffset + 1
		s.scanned += n
	}
	return nil
}

// Append encodes msg at the end of the log.
func (s *Store) Append(_ context.Context, msg *record.Message) (store.AppendResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return store.AppendResult{}, err
	}
	size, err := record.Size(msg)
	switch {
	case errors.Is(err, record.ErrInvalidTopic):
		return store.AppendResult{}, fmt.Errorf("filestore: %w: %w", store.ErrInvalidTopic, err)
	case err != nil:
		return store.AppendResult{}, fmt.Errorf("filestore: %w: %w", store.ErrMessageTooLarge, err)
	case int64(size)+record.FillerSize > s.segSize:
		return store.AppendResult{}, fmt.Errorf("filestore: %d-byte record in %d-byte segments: %w", size, s.segSize, store.ErrMessageTooLarge)
	}
	if err := s.catchUpQueues(); err != nil {
		return store.AppendResult{}, err
	}
	f, base := s.seg(s.max)
	if f == nil {
		if f, err = s.addSegment(s.max - s.max%s.segSize); err != nil {
			return store.AppendResult{}, err
		}
		base = s.base
	}
	if pos := s.max - base; pos+int64(size)+record.FillerSize > s.segSize {
		filler := make([]byte, record.FillerSize)
		record.PutFiller(filler, int32(s.segSize-pos))
		if _, err := f.WriteAt(filler, pos); err != nil {
			return store.AppendResult{}, fmt.Errorf("filestore: %w", err)
		}
		if err := f.Truncate(s.segSize); err != nil { // the filler's zeros
			return store.AppendResult{}, fmt.Errorf("filestore: %w", err)
		}
		s.max = base + s.segSize
		s.scanned = max(s.scanned, s.max)
		if f, err = s.addSegment(s.max); err != nil {
			return store.AppendResult{}, err
		}
		base = s.max
	}
	k := msg.Topic + "\x00" + strconv.Itoa(int(msg.QueueID))
	qo := s.queues[k]
	ts := s.now().UnixMilli()
	buf, err := record.Encode(make([]byte, 0, size), msg, qo, s.max, ts)
	if err != nil {
		return store.AppendResult{}, fmt.Errorf("filestore: %w: %w", store.ErrMessageTooLarge, err)
	}
	if _, err := f.WriteAt(buf, s.max-base); err != nil {
		return store.AppendResult{}, fmt.Errorf("filestore: %w", err)
	}
	res := store.AppendResult{Offset: s.max, NextOffset: s.max + int64(size), QueueOffset: qo, StoreTimestamp: ts, Size: int32(size)}
	s.queues[k] = qo + 1
	s.max += int64(size)
	s.scanned = s.max
	s.watch.Notify()
	return res, nil
}

// AppendAt writes raw bytes at the max offset.
func (s *Store) AppendAt(offset int64, data []byte) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	if len(s.segs) == 0 && s.max == 0 && offset != 0 {
		// An empty log starts where its master's bytes start.
		if err := os.WriteFile(filepath.Join(s.dir, "MIN"), []byte(strconv.FormatInt(offset, 10)), 0o644); err != nil {
			return 0, fmt.Errorf("filestore: %w", err)
		}
		s.min, s.max, s.flushed, s.scanned = offset, offset, offset, offset
	}
	if offset != s.max {
		return s.max, fmt.Errorf("filestore: append at %d, max offset %d: %w", offset, s.max, store.ErrOffsetMismatch)
	}
	if len(data) == 0 {
		return s.max, nil
	}
	f, base := s.seg(offset)
	if f == nil {
		var err error
		if f, err = s.addSegment(offset - offset%s.segSize); err != nil {
			return s.max, err
		}
		base = offset - offset%s.segSize
	}
	if offset-base+int64(len(data)) > s.segSize {
		return s.max, fmt.Errorf("filestore: %d bytes at %d cross the segment end %d: %w", len(data), offset, base+s.segSize, store.ErrSegmentOverflow)
	}
	if _, err := f.WriteAt(data, offset-base); err != nil {
		return s.max, fmt.Errorf("filestore: %w", err)
	}
	s.max += int64(len(data))
	s.watch.Notify()
	return s.max, nil
}

// Read copies at most max bytes at offset, never crossing a segment end.
func (s *Store) Read(offset int64, n int) (store.View, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return store.View{}, err
	}
	if offset < s.min || offset > s.max {
		return store.View{}, fmt.Errorf("filestore: read at %d outside [%d, %d]: %w", offset, s.min, s.max, store.ErrOffsetOutOfRange)
	}
	if offset == s.max || n <= 0 {
		return store.View{Offset: offset}, nil
	}
	f, base := s.seg(offset)
	end := min(s.max, base+s.segSize, offset+int64(n))
	buf := make([]byte, end-offset)
	if _, err := f.ReadAt(buf, offset-base); err != nil {
		return store.View{}, fmt.Errorf("filestore: read at %d: %w", offset, err)
	}
	return store.View{Offset: offset, Data: buf}, nil
}

// ReadMessages decodes up to n records from offset, skipping fillers.
func (s *Store) ReadMessages(offset int64, n int) ([]record.Record, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return nil, 0, err
	}
	if offset < s.min || offset > s.max {
		return nil, 0, fmt.Errorf("filestore: read messages at %d outside [%d, %d]: %w", offset, s.min, s.max, store.ErrOffsetOutOfRange)
	}
	var out []record.Record
	hdr := make([]byte, 8)
	for len(out) < n && offset < s.max {
		f, base := s.seg(offset)
		if offset+8 > s.max {
			break
		}
		if _, err := f.ReadAt(hdr, offset-base); err != nil {
			return nil, 0, fmt.Errorf("filestore: %w", err)
		}
		if _, ok := record.IsFiller(hdr); ok {
			offset = base + s.segSize
			continue
		}
		size := int64(int32(binary.BigEndian.Uint32(hdr)))
		if binary.BigEndian.Uint32(hdr[4:]) != record.MagicCode || size < record.MinRecordSize || offset-base+size > s.segSize {
			return nil, 0, fmt.Errorf("filestore: no record at %d: %w", offset, store.ErrNotBoundary)
		}
		if offset+size > s.max {
			break // still arriving
		}
		buf := make([]byte, size)
		if _, err := f.ReadAt(buf, offset-base); err != nil {
			return nil, 0, fmt.Errorf("filestore: %w", err)
		}
		rec, err := record.Decode(buf)
		if err != nil {
			return nil, 0, fmt.Errorf("filestore: record at %d: %w (%w)", offset, store.ErrCorrupt, err)
		}
		out = append(out, rec)
		offset += size
	}
	return out, offset, nil
}

// Bounds reports the offsets and geometry.
func (s *Store) Bounds() store.Bounds {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := s.max - s.max%s.segSize
	if len(s.segs) > 0 {
		last = s.base + int64(len(s.segs)-1)*s.segSize
	}
	return store.Bounds{Min: s.min, Max: s.max, Flushed: s.flushed, LastSegmentStart: last, SegmentSize: s.segSize}
}

// isBoundary reports whether off starts a record (or is the max offset).
func (s *Store) isBoundary(off int64) (bool, error) {
	if off == s.max || off == s.min {
		return true, nil
	}
	_, base := s.seg(off)
	pos := max(base, s.min)
	hdr := make([]byte, 8)
	for pos < off {
		f, _ := s.seg(pos)
		if _, err := f.ReadAt(hdr, pos-base); err != nil {
			return false, fmt.Errorf("filestore: %w", err)
		}
		if _, ok := record.IsFiller(hdr); ok {
			return false, nil
		}
		n := int64(int32(binary.BigEndian.Uint32(hdr)))
		if n < record.MinRecordSize {
			return false, nil
		}
		pos += n
	}
	return pos == off, nil
}

// Truncate cuts the log back to offset, a record boundary.
func (s *Store) Truncate(offset int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return err
	}
	if offset < s.min || offset > s.max {
		return fmt.Errorf("filestore: truncate to %d outside [%d, %d]: %w", offset, s.min, s.max, store.ErrOffsetOutOfRange)
	}
	if ok, err := s.isBoundary(offset); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("filestore: truncate to %d: %w", offset, store.ErrNotBoundary)
	}
	if offset == s.max {
		return nil
	}
	keep := int((offset-s.base)/s.segSize) + 1
	for _, f := range s.segs[keep:] {
		name := f.Name()
		f.Close()
		if err := os.Remove(name); err != nil {
			return fmt.Errorf("filestore: %w", err)
		}
	}
	s.segs = s.segs[:keep]
	last := s.segs[keep-1]
	if err := last.Truncate(offset - (s.base + int64(keep-1)*s.segSize)); err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	if err := last.Sync(); err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	s.max = offset
	s.flushed = min(s.flushed, offset)
	s.scanned, s.queues = s.min, map[string]int64{}
	s.watch.Notify()
	return nil
}

// Flush makes every written byte durable.
func (s *Store) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return err
	}
	return s.flushLocked()
}

func (s *Store) flushLocked() error {
	for _, f := range s.segs {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("filestore: %w", err)
		}
	}
	s.flushed = s.max
	return nil
}

// Watch registers ch for a non-blocking send whenever the max offset changes.
func (s *Store) Watch(ch chan<- struct{}) (cancel func()) {
	return s.watch.Watch(ch)
}

// Close flushes and closes the files.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	s.closed = true
	err := s.flushLocked()
	s.closeFiles()
	return err
}

func (s *Store) closeFiles() {
	for _, f := range s.segs {
		f.Close()
	}
	s.segs = nil
}
