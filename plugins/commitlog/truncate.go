package commitlog

import (
	"fmt"

	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// Truncate cuts the log back to offset, a record boundary in [min, max]
// (see store.Store). Crash-safe, in this order: (1) the checkpoint is
// rewritten so that recovery starts at or before offset and trusts no byte
// past it; (2) the bytes from offset to the old end of its segment are
// zeroed and msynced, so no record past offset can parse again; (3) later
// segments are removed, last first. A crash after (1) recovers either the
// old log or the cut one, never a mix; after (2) recovery ends at offset
// and removes what (3) did not (RocketMQ #10666 left the old bytes valid).
func (l *Log) Truncate(offset int64) error {
	l.ckptMu.Lock()
	defer l.ckptMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waitFill()
	if l.closed {
		return fmt.Errorf("commitlog: truncate: %w", store.ErrClosed)
	}
	l.dispatch() // the table below is exact: drain the dispatcher's work
	mx := l.max.Load()
	if offset == mx {
		return nil
	}
	segs := l.segList()
	seg, _ := segmentFor(segs, offset)
	if seg == nil || offset > mx {
		lo := mx
		if len(segs) > 0 {
			lo = segs[0].start
		}
		return fmt.Errorf("commitlog: truncate to %d: %w: log holds [%d, %d]", offset, store.ErrOffsetOutOfRange, lo, mx)
	}
	hi := min(mx, seg.end())
	// A boundary: a segment start, the end of the last whole record (a
	// replica may hold part of the next one), or where a record verifies.
	if pos := offset - seg.start; pos != 0 && offset != l.dispatched {
		info, err := record.Verify(seg.data[pos : hi-seg.start])
		if err == nil && !info.Filler && info.PhysicalOffset != offset {
			err = fmt.Errorf("PHYSICALOFFSET %d", info.PhysicalOffset)
		}
		if err != nil {
			return fmt.Errorf("commitlog: truncate to %d: %w: %w", offset, store.ErrNotBoundary, err)
		}
	}
	table, scanAt := l.queues, l.dispatched
	if offset < scanAt {
		var err error
		if table, err = l.queuesAt(offset, scanAt); err != nil {
			return err
		}
		scanAt = offset
	}
	flushed := min(l.flushed.Load(), offset)
	if flushed < scanAt {
		// The checkpoint's scan offset may not pass its flushed offset
		// (checkpoint.valid): make the records below scanAt durable.
		if err := l.flushTo(scanAt); err != nil {
			return fmt.Errorf("commitlog: truncate to %d: %w", offset, err)
		}
		flushed = scanAt
	}
	c := checkpoint{Flushed: flushed, Scan: scanAt, Timestamp: l.lastTS, Queues: table}
	if err := l.writeCheckpoint(&c); err != nil {
		return err
	}
	l.lastCkpt = c
	l.truncGen.Add(1)
	if _, err := l.cutTail(offset, hi); err != nil {
		return err
	}
	if l.spare != nil {
		l.dropSpare(l.spare)
		l.spare = nil
	}
	l.max.Store(offset)
	l.flushed.Store(flushed)
	l.queues, l.dispatched, l.stalled = table, scanAt, false
	l.dispatch()
	if segs := l.segList(); len(segs) > 0 {
		l.requestSpare(segs[len(segs)-1].end())
	}
	l.m.truncations.Inc()
	l.m.maxOffset.Set(float64(offset))
	l.m.flushedOffset.Set(float64(flushed))
	l.log.Info("truncated", "offset", offset, "old_max", mx)
	l.watch.Notify()
	return nil
}

// queuesAt returns the queue table as it was at offset, a record boundary
// below dispatched: for each queue, the queue offset of its first record
// at or after offset (queue offsets grow along the log). mu held.
func (l *Log) queuesAt(offset, dispatched int64) (queueTable, error) {
	table := l.queues.clone()
	seen := map[string]map[int32]bool{}
	segs := l.segList()
	for pos := offset; pos < dispatched; {
		seg, _ := segmentFor(segs, pos)
		off := pos - seg.start
		if seg.size-off < record.FillerSize {
			pos = seg.end()
			continue
		}
		info, err := record.VerifyHeader(seg.data[off:])
		if err != nil {
			return nil, corruptf(seg.path, pos, err, "record being truncated does not verify")
		}
		if info.Filler {
			pos = seg.end()
			continue
		}
		q := seen[string(info.Topic)]
		if q == nil {
			q = map[int32]bool{}
			seen[string(info.Topic)] = q
		}
		if !q[info.QueueID] {
			q[info.QueueID] = true
			table.set(info.Topic, info.QueueID, info.QueueOffset)
		}
		pos += int64(info.Size)
	}
	return table, nil
}
