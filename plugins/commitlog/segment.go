package commitlog

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/edsrzf/mmap-go"
	"github.com/hashicorp/go-hclog"

	"github.com/replicatorhq/replicator/plugins/commitlog/vfs"
	"github.com/replicatorhq/replicator/sdk/store"
)

var pageSize = int64(os.Getpagesize())

// SegmentStarts lists the start offsets of the segment files (regular
// files named by 20 decimal digits) in the commit-log directory dir, in
// order. Tools that compare or inspect logs on disk use it; Open does its
// own, stricter, scan.
func SegmentStarts(dir string) ([]int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("commitlog: listing segments: %w", err)
	}
	var out []int64
	for _, e := range ents {
		if start, ok := store.ParseSegmentName(e.Name()); ok && e.Type().IsRegular() {
			out = append(out, start)
		}
	}
	slices.Sort(out)
	return out, nil
}

// segment is one mapped segment file. Its memory stays mapped while refs
// is positive: the log holds one reference while the segment is part of
// the log, and every View and internal pin holds one more. The last
// Release unmaps it and closes the file.
type segment struct {
	start int64
	size  int64
	path  string
	f     vfs.File
	data  mmap.MMap
	log   hclog.Logger

	refs    atomic.Int64
	mtime   atomic.Int64 // Unix ns of the last write (retention age)
	popTo   atomic.Int64 // [0, popTo) is populated, or claimed by a populating caller
	touched atomic.Bool  // read since the last trim (see trimSealed)
	trimmed atomic.Bool  // sealed, flushed and its pages released once
}

// createSegment creates path at full length (fallocate, so writes through
// the mapping never hit ENOSPC as SIGBUS) and maps it. path is in the
// allocation directory: the file joins DATA/commitlog only by a rename
// once it is whole (Log.install).
func createSegment(fsys vfs.FS, path string, start, size int64, lg hclog.Logger, now time.Time) (*segment, error) {
	f, err := fsys.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("commitlog: create segment: %w", err)
	}
	if err := f.Preallocate(size); err != nil {
		f.Close()
		fsys.Remove(path)
		return nil, fmt.Errorf("commitlog: size %s: %w", path, err)
	}
	s, err := mapSegment(f, path, start, size, lg)
	if err != nil {
		fsys.Remove(path)
		return nil, err
	}
	s.mtime.Store(now.UnixNano())
	return s, nil
}

// openSegment maps an existing segment file of the given size.
func openSegment(fsys vfs.FS, path string, start, size int64, lg hclog.Logger) (*segment, error) {
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("commitlog: open segment: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("commitlog: stat segment: %w", err)
	}
	s, err := mapSegment(f, path, start, size, lg)
	if err != nil {
		return nil, err
	}
	s.mtime.Store(fi.ModTime().UnixNano())
	return s, nil
}

func mapSegment(f vfs.File, path string, start, size int64, lg hclog.Logger) (*segment, error) {
	m, err := f.Map(int(size))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("commitlog: mmap %s: %w", path, err)
	}
	s := &segment{start: start, size: size, path: path, f: f, data: m, log: lg}
	s.refs.Store(1)
	return s, nil
}

func (s *segment) end() int64 { return s.start + s.size }

// pin takes a reference unless the segment is already unmapped.
func (s *segment) pin() bool {
	for {
		r := s.refs.Load()
		if r <= 0 {
			return false
		}
		if s.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

// Release drops a reference (a View's, a pin's or the log's); the last one
// unmaps the segment. It implements store.Releaser.
func (s *segment) Release() {
	if s.refs.Add(-1) == 0 {
		s.unmap()
	}
}

func (s *segment) unmap() {
	err := s.data.Unmap()
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.log.Error("unmapping segment", "file", s.path, "error", err)
	}
}

// msync flushes [lo, hi) (segment-relative) of the mapping to disk.
func (s *segment) msync(lo, hi int64) error {
	if hi <= lo {
		return nil
	}
	lo &^= pageSize - 1
	if err := s.f.MSync(s.data[lo:hi]); err != nil {
		return fmt.Errorf("commitlog: msync %s [%d,%d): %w", s.path, lo, hi, err)
	}
	return nil
}

// populate maps every page of a new, unpublished segment writable ahead
// of use.
func (s *segment) populate() {
	defer s.popTo.Store(s.size)
	if s.populateFrom(0) {
		return
	}
	for i := int64(0); i < s.size; i += pageSize {
		s.data[i] = 0 // the file is new and unpublished: every byte is zero
	}
}

// populateFrom maps the pages of [from, size) writable without touching
// their contents, so it is safe on the active segment while appends run.
// It reports false when the kernel lacks MADV_POPULATE_WRITE (Linux < 5.14).
func (s *segment) populateFrom(from int64) bool {
	from &^= pageSize - 1
	return populateWrite(s.data[from:]) == nil
}

// prefaultChunk populates the next chunk bytes of the segment that nobody
// populated yet, starting no lower than from (pages below the writer are
// not worth it), with MADV_POPULATE_WRITE: safe while appends run, it
// never changes contents. Callers claim a range on popTo before they
// populate it, so no page is populated twice. It reports whether it did
// any work; false also when the segment is populated to its end or the
// kernel lacks MADV_POPULATE_WRITE (then popTo jumps to the end: nobody
// tries again).
func (s *segment) prefaultChunk(from, chunk int64) bool {
	from &^= pageSize - 1
	for {
		cur := s.popTo.Load()
		lo := max(cur, from)
		if lo >= s.size {
			return false
		}
		hi := min((lo+chunk+pageSize-1)&^(pageSize-1), s.size)
		if !s.popTo.CompareAndSwap(cur, hi) {
			continue
		}
		if populateWrite(s.data[lo:hi]) != nil {
			s.popTo.Store(s.size)
			return false
		}
		return true
	}
}

// mapForRead maps the pages of [from, to), already in the page cache,
// with one call (MADV_POPULATE_READ) instead of a read fault per page. It
// is an optimisation only: on failure (Linux < 5.14) reads fault as usual.
func (s *segment) mapForRead(from, to int64) {
	from &^= pageSize - 1
	to = min((to+pageSize-1)&^(pageSize-1), s.size)
	if to > from {
		populateRead(s.data[from:to])
	}
}

// release drops the page-table entries of [lo, hi) so they stop counting
// in the process's resident set. The file's pages stay in the page cache
// and dirty ones are still written back (MAP_SHARED), so this is safe
// while Views read the range: they fault pages back in.
func (s *segment) release(lo, hi int64) {
	lo &^= pageSize - 1
	hi = min((hi+pageSize-1)&^(pageSize-1), s.size)
	if hi <= lo {
		return
	}
	if err := dontNeed(s.data[lo:hi]); err != nil {
		s.log.Debug("madvise DONTNEED", "file", s.path, "error", err)
	}
}

// zeroFrom zeroes [from, s.size) where it is not zero already, msyncs it,
// and returns the highest offset it changed (from if none). Pages that
// are zero are only read, so a fresh tail costs no writes.
func (s *segment) zeroFrom(from int64) (int64, error) {
	hiChanged := from
	for p := from; p < s.size; {
		next := min((p|(pageSize-1))+1, s.size)
		chunk := s.data[p:next]
		for _, c := range chunk {
			if c != 0 {
				clear(chunk)
				hiChanged = next
				break
			}
		}
		p = next
	}
	if err := s.msync(from, hiChanged); err != nil {
		return from, err
	}
	return hiChanged, nil
}

// zeroRange zeroes [lo, hi) and msyncs it.
func (s *segment) zeroRange(lo, hi int64) error {
	if hi <= lo {
		return nil
	}
	clear(s.data[lo:hi])
	return s.msync(lo, hi)
}

// syncDir fsyncs a directory so that created, renamed and removed entries
// are durable.
func syncDir(fsys vfs.FS, dir string) error {
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("commitlog: fsync dir %s: %w", dir, err)
	}
	return nil
}

func segmentPath(dir string, start int64) string { return filepath.Join(dir, store.SegmentName(start)) }
