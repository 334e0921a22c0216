package commitlog

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/replicatorhq/replicator/sdk/store"
)

// flusher runs group commits (sync mode, on demand) and the periodic
// flush and checkpoint (both modes, every FlushInterval).
func (l *Log) flusher() {
	t := time.NewTicker(l.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-l.kick:
			l.groupCommit()
		case <-t.C:
			if err := l.checkpointNow(false); err != nil {
				l.log.Error("periodic flush", "error", err)
			}
		}
	}
}

// groupCommit flushes everything appended so far with one msync per dirty
// segment and wakes every Append waiting for it.
func (l *Log) groupCommit() {
	gen := l.truncGen.Load()
	target := l.max.Load()
	err := l.flushTo(target)
	l.advanceFlushed(gen, target, err)
	l.gcMu.Lock()
	close(l.gcDone)
	l.gcDone = make(chan struct{})
	l.gcMu.Unlock()
}

// advanceFlushed records a completed flush up to target, unless a
// truncation happened meanwhile (then the flushed offset it set stands).
func (l *Log) advanceFlushed(gen uint64, target int64, err error) {
	if err != nil {
		l.flushErr.CompareAndSwap(nil, &err)
		l.log.Error("flush", "error", err)
		return
	}
	l.mu.Lock()
	if l.truncGen.Load() == gen && target > l.flushed.Load() {
		l.flushed.Store(target)
		l.m.flushedOffset.Set(float64(target))
	}
	l.mu.Unlock()
}

// flushTo msyncs [flushed, target) segment by segment, then the directory
// if a segment file was created since the last flush.
func (l *Log) flushTo(target int64) error {
	from := l.flushed.Load()
	if from >= target {
		return nil
	}
	start := time.Now()
	segs := l.segList()
	for _, s := range segs {
		if s.end() <= from || s.start >= target || !s.pin() {
			continue
		}
		err := s.msync(max(from, s.start)-s.start, min(target, s.end())-s.start)
		s.Release()
		if err != nil {
			return err
		}
	}
	if l.dirDirty.Swap(false) {
		if err := syncDir(l.fs, l.dir); err != nil {
			l.dirDirty.Store(true)
			return err
		}
	}
	l.m.flushes.Inc()
	l.m.flushDuration.Observe(time.Since(start).Seconds())
	return nil
}

// waitFlush waits until a group commit covers target (sync mode).
func (l *Log) waitFlush(ctx context.Context, target int64) error {
	timer := time.NewTimer(l.opts.SyncFlushTimeout)
	defer timer.Stop()
	for {
		if l.flushed.Load() >= target {
			return nil
		}
		if p := l.flushErr.Load(); p != nil {
			return fmt.Errorf("commitlog: append: record at %d stored but not flushed: %w", target, *p)
		}
		l.gcMu.Lock()
		ch := l.gcDone
		l.gcMu.Unlock()
		select {
		case l.kick <- struct{}{}:
		default:
		}
		select {
		case <-ch:
			if l.isClosed.Load() && l.flushed.Load() < target && l.flushErr.Load() == nil {
				return fmt.Errorf("commitlog: append: %w: closed before the flush", store.ErrFlushDiskTimeout)
			}
		case <-timer.C:
			l.m.flushTimeouts.Inc()
			return fmt.Errorf("commitlog: append: record ending at %d: %w after %v", target, store.ErrFlushDiskTimeout, l.opts.SyncFlushTimeout)
		case <-ctx.Done():
			return fmt.Errorf("commitlog: append: record ending at %d: %w: %w", target, store.ErrFlushDiskTimeout, ctx.Err())
		}
	}
}

// checkpointNow flushes everything appended so far, writes the checkpoint
// when it changed, and trims sealed segments from the resident set.
//
// clean marks the checkpoint written by Close: the log ends exactly at its
// flushed offset, so recovery trusts no byte past it.
func (l *Log) checkpointNow(clean bool) error {
	if err := l.flushAndCheckpoint(clean); err != nil {
		return err
	}
	l.trimSealed()
	return nil
}

// flushAndCheckpoint is checkpointNow without the trim.
func (l *Log) flushAndCheckpoint(clean bool) error {
	l.ckptMu.Lock()
	defer l.ckptMu.Unlock()
	l.mu.Lock()
	gen := l.truncGen.Load()
	target := l.max.Load()
	c := checkpoint{Clean: clean, Flushed: target, Scan: l.dispatched, Timestamp: l.lastTS}
	changed := c.Scan != l.lastCkpt.Scan || c.Flushed != l.lastCkpt.Flushed || c.Clean != l.lastCkpt.Clean
	if changed && c.Scan != l.lastCkpt.Scan {
		c.Queues = l.queues.clone()
	} else {
		c.Queues = l.lastCkpt.Queues
	}
	l.mu.Unlock()
	err := l.flushTo(target)
	l.advanceFlushed(gen, target, err)
	if err != nil {
		return err
	}
	if changed {
		// Truncate holds ckptMu, so gen cannot have moved: c is current.
		if err := l.writeCheckpoint(&c); err != nil {
			return err
		}
		l.lastCkpt = c
	}
	return nil
}

// trimSealed drops the page-table entries of sealed, flushed segments so
// the resident set stays near the active segment plus what readers use:
// once when a segment is sealed and flushed, then again after reads.
func (l *Log) trimSealed() {
	segs := l.segList()
	fl := l.flushed.Load()
	for i, s := range segs {
		if i == len(segs)-1 || s.end() > fl {
			break
		}
		if !s.trimmed.Load() || s.touched.Load() {
			if !s.pin() {
				continue
			}
			s.touched.Store(false)
			s.release(0, s.size)
			s.trimmed.Store(true)
			s.Release()
		}
	}
}

// Prefaulting works in chunks on a per-segment cursor (segment.popTo): the
// allocator populates warmChunk at a time ahead of the writer, first the
// active segment, then the preallocated next one, never more than
// prefaultAhead bytes past the max offset (a master that only serves
// reads populates nothing), and not at all while the log is a replica:
// replicated appends write with pwrite, which fills fresh pages itself
// (Log.replicaWrite). No page is populated twice and no populated segment
// is thrown away.
const (
	warmChunk     = 2 << 20
	prefaultAhead = 64 << 20
)

// allocator creates the next segment in the background (RocketMQ's
// AllocateMappedFileService), so that a roll costs a rename, and, with
// Prefault, populates the active and the next segment ahead of the writer.
// Requests are served between chunks, so a roll never waits for one;
// Append wakes it as the max offset moves (warmKick).
func (l *Log) allocator() {
	var warm []*segment // pinned segments to populate, in log order
	defer func() {
		for _, s := range warm {
			s.Release()
		}
	}()
	for {
		// Drop what is populated to its end, sealed (the writer is past
		// it) or no longer in the log (only our reference left): a pin
		// held here would also keep retention from deleting the segment.
		mx := l.max.Load()
		warm = slices.DeleteFunc(warm, func(s *segment) bool {
			if s.refs.Load() > 1 && s.popTo.Load() < s.size && s.end() > mx {
				return false
			}
			s.Release()
			return true
		})
		s, from := l.nextToWarm(warm)
		if s == nil {
			select {
			case <-l.done:
				return
			case start := <-l.allocReq:
				warm = l.queueSpare(warm, start)
			case seg := <-l.warmReq:
				warm = queueWarm(warm, seg)
			case <-l.warmKick:
			}
			continue
		}
		select {
		case <-l.done:
			return
		case start := <-l.allocReq:
			warm = l.queueSpare(warm, start)
		case seg := <-l.warmReq:
			warm = queueWarm(warm, seg)
		default:
			// nextToWarm picked pages below the end: this populates a
			// chunk, or moves popTo to the end when the kernel lacks
			// MADV_POPULATE_WRITE.
			s.prefaultChunk(from, warmChunk)
		}
	}
}

// nextToWarm returns the first segment of warm (in log order) with pages
// to populate within the window ahead of the writer, and where to start;
// nil when there is none (or the log is a replica).
func (l *Log) nextToWarm(warm []*segment) (*segment, int64) {
	if l.replicating.Load() {
		return nil, 0
	}
	mx := l.max.Load()
	for _, s := range warm {
		from := max(mx-s.start, 0)
		next := s.start + max(s.popTo.Load(), from)
		if next >= mx+l.warmAhead {
			return nil, 0 // far enough ahead: wait for the writer
		}
		if next < s.end() {
			return s, from
		}
	}
	return nil, 0
}

// kickWarm wakes the allocator when an append from off to next crossed a
// warmChunk boundary, so that populating keeps prefaultAhead ahead.
func (l *Log) kickWarm(off, next int64) {
	if !l.opts.Prefault || off/warmChunk == next/warmChunk {
		return
	}
	select {
	case l.warmKick <- struct{}{}:
	default:
	}
}

func (l *Log) queueSpare(warm []*segment, start int64) []*segment {
	if sp := l.preallocate(start); sp != nil {
		return insertByStart(warm, sp)
	}
	return warm
}

func queueWarm(warm []*segment, seg *segment) []*segment {
	if seg.pin() {
		return insertByStart(warm, seg)
	}
	return warm
}

// insertByStart keeps warm in log order: the spare may be queued before
// the active segment that precedes it.
func insertByStart(warm []*segment, seg *segment) []*segment {
	i, _ := slices.BinarySearchFunc(warm, seg.start, func(s *segment, start int64) int { return cmp.Compare(s.start, start) })
	return slices.Insert(warm, i, seg)
}

// preallocate creates the segment starting at start as the spare. With
// Prefault it returns the spare pinned, for the allocator to populate
// (after publishing it: a roll may take it at once); on a kernel without
// MADV_POPULATE_WRITE it populates it by touching every page first, which
// is safe only before publishing.
func (l *Log) preallocate(start int64) *segment {
	l.mu.Lock()
	gen := l.truncGen.Load()
	skip := l.closed || (l.spare != nil && l.spare.start == start)
	l.mu.Unlock()
	if skip {
		return nil
	}
	seg, err := l.newSegment(start, true)
	if err != nil {
		l.log.Warn("preallocating segment", "start", start, "error", err)
		return nil
	}
	// One page tells whether the kernel has MADV_POPULATE_WRITE; without
	// it, the whole segment is populated by touch, before publishing.
	if l.opts.Prefault && !l.replicating.Load() && !seg.prefaultChunk(0, pageSize) {
		seg.populate()
	}
	l.mu.Lock()
	segs := l.segList()
	ok := !l.closed && l.truncGen.Load() == gen && l.spare == nil && len(segs) > 0 && segs[len(segs)-1].end() == start
	drop := !ok
	if ok {
		l.spare = seg
		ok = l.opts.Prefault && seg.popTo.Load() < seg.size && seg.pin()
	}
	l.mu.Unlock()
	if drop {
		l.dropSpare(seg)
		return nil
	}
	if ok {
		return seg
	}
	return nil
}

// housekeeper runs retention and memory trimming every RetentionInterval.
func (l *Log) housekeeper() {
	t := time.NewTicker(l.opts.RetentionInterval)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-t.C:
			if _, err := l.enforceRetention(); err != nil {
				l.log.Error("retention", "error", err)
			}
			l.trimSealed()
		}
	}
}

// enforceRetention deletes whole segments from the front of the log while
// they are older than RetentionAge or the log is larger than
// RetentionBytes; never the active segment, never one with a live View.
// It returns how many it deleted.
func (l *Log) enforceRetention() (int, error) {
	age, limit := l.opts.RetentionAge, l.opts.RetentionBytes
	if age == 0 && limit == 0 {
		return 0, nil
	}
	now := l.now()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0, nil
	}
	segs := l.segList()
	total := int64(len(segs)) * l.opts.SegmentSize
	n := 0
	for ; n < len(segs)-1; n++ {
		s := segs[n]
		old := age > 0 && now.Sub(time.Unix(0, s.mtime.Load())) > age
		big := limit > 0 && total > limit
		if !old && !big {
			break
		}
		if !s.refs.CompareAndSwap(1, 0) {
			l.log.Debug("retention: segment in use by a view", "file", s.path)
			break
		}
		total -= l.opts.SegmentSize
	}
	victims := segs[:n:n]
	if n > 0 {
		rest := append([]*segment(nil), segs[n:]...)
		l.segs.Store(&rest)
		l.m.segments.Set(float64(len(rest)))
	}
	l.mu.Unlock()
	var firstErr error
	for _, s := range victims {
		s.unmap()
		if err := l.fs.Remove(s.path); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("commitlog: retention: %w", err)
		}
		l.log.Info("retention deleted segment", "file", s.path, "start", s.start)
		l.m.retained.Inc()
	}
	if n > 0 {
		if err := syncDir(l.fs, l.dir); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return n, firstErr
}
