package commitlog

import (
	"errors"
	"fmt"

	"github.com/replicatorhq/replicator/sdk/record"
)

// The record dispatch keeps the queue table (topic → queue → next queue
// offset) and the dispatched offset (the end of the last whole record)
// current. Append dispatches its own record. Replicated bytes (AppendAt,
// AppendAtFrom) are dispatched off the receive path, by the dispatcher
// goroutine: the table is needed only when the replica is promoted (the
// next Append continues the queues) and by the checkpoint, and a
// checkpoint whose scan offset lags its flushed offset is one recovery
// already handles (it verifies the records from the scan offset on, as
// after any crash). Whoever needs the table exact drains the dispatch
// first, under mu: Append, Truncate and Close.
//
// The dispatcher reads record headers through the mapping without the
// log's lock: the bytes below the max offset do not change but by
// Truncate or a restart of an empty log, which bump truncGen, and a
// round whose truncGen or starting offset moved is discarded. It pins
// the segment it reads, so a concurrent retention or truncation cannot
// unmap it underneath.

// dispatchRound bounds the bytes one dispatcher round reads before it
// publishes its progress; dispatchBatch is how far the dispatched offset
// may trail the max offset before a replicated append wakes the
// dispatcher (fewer wake-ups while a catch-up streams 32 KiB frames).
const (
	dispatchRound = 4 << 20
	dispatchBatch = 256 << 10
)

// dispatch advances the dispatched offset over the whole records below
// the max offset, keeping the queue table current (mu held). It is the
// synchronous drain of the dispatcher's work.
func (l *Log) dispatch() {
	mx := l.max.Load()
	if l.dispatched >= mx || l.stalled {
		return
	}
	to, ts, ok, err := walkRecords(l.segList(), l.dispatched, mx, mx, l.queues.set)
	l.advanceDispatch(to, ts, ok, err)
}

// advanceDispatch records a walk's progress (mu held); ts is the last
// record's store timestamp when hasTS.
func (l *Log) advanceDispatch(to, ts int64, hasTS bool, err error) {
	if hasTS {
		l.lastTS = ts
	}
	l.dispatched = to
	if err != nil {
		l.stalled = true
		l.log.Warn("replicated bytes are not records; queue offsets stop here", "offset", to, "error", err)
	}
}

// kickDispatch wakes the dispatcher when the dispatched offset trails the
// max offset by dispatchBatch or more (mu held).
func (l *Log) kickDispatch() {
	if l.max.Load()-l.dispatched < dispatchBatch || l.stalled {
		return
	}
	select {
	case l.dispatchKick <- struct{}{}:
	default:
	}
}

// dispatcher dispatches replicated records in the background until Close.
func (l *Log) dispatcher() {
	for {
		select {
		case <-l.done:
			return
		case <-l.dispatchKick:
		}
		for l.dispatchStep() {
			select {
			case <-l.done:
				return
			default:
			}
		}
	}
}

// dispatchStep runs one dispatcher round: at most dispatchRound bytes of
// one segment, read without mu and published under it. It reports whether
// more remains.
func (l *Log) dispatchStep() bool {
	l.mu.Lock()
	from, mx, gen := l.dispatched, l.max.Load(), l.truncGen.Load()
	if l.closed || l.stalled || from >= mx {
		l.mu.Unlock()
		return false
	}
	seg, _ := segmentFor(l.segList(), from)
	if seg == nil || !seg.pin() {
		l.mu.Unlock()
		return false
	}
	l.mu.Unlock()

	limit := min(from+dispatchRound, seg.end())
	seg.mapForRead(from-seg.start, min(mx, seg.end())-seg.start)
	upd := queueTable{}
	to, ts, ok, err := walkRecords([]*segment{seg}, from, mx, limit, upd.set)
	seg.Release()

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.truncGen.Load() != gen || l.dispatched != from {
		return false // truncated, restarted or drained meanwhile: start over
	}
	for topic, qs := range upd {
		for qid, next := range qs {
			l.queues.set([]byte(topic), qid, next)
		}
	}
	l.advanceDispatch(to, ts, ok, err)
	return to > from && l.dispatched < l.max.Load() && !l.stalled
}

// walkRecords walks the whole records of segs from offset from, reading
// no byte at or past mx and starting no record at or past limit, and calls
// set with each record's topic, queue and next queue offset. It returns
// where it stopped, the store timestamp of the last record (with true;
// false when it walked none) and, when it stopped at bytes that are not records, why. Filler records
// and a segment tail shorter than a filler end their segment (once mx is
// past it). A segment missing from segs stops the walk.
func walkRecords(segs []*segment, from, mx, limit int64, set func(topic []byte, qid int32, next int64)) (int64, int64, bool, error) {
	off, ts, seen := from, int64(0), false
	for off < mx && off < limit {
		seg, _ := segmentFor(segs, off)
		if seg == nil {
			return off, ts, seen, nil
		}
		pos := off - seg.start
		end := min(mx, seg.end()) - seg.start
		if seg.size-pos < record.FillerSize {
			if mx < seg.end() {
				return off, ts, seen, nil
			}
			off = seg.end()
			continue
		}
		info, err := record.VerifyHeader(seg.data[pos:end])
		if errors.Is(err, record.ErrShort) {
			return off, ts, seen, nil
		}
		if err == nil && info.Filler && info.Size != int32(seg.size-pos) {
			err = fmt.Errorf("filler of %d bytes with %d left", info.Size, seg.size-pos)
		}
		if err != nil {
			return off, ts, seen, fmt.Errorf("%s at %d: %w", seg.path, off, err)
		}
		if info.Filler {
			if mx < seg.end() {
				return off, ts, seen, nil
			}
			off = seg.end()
			continue
		}
		set(info.Topic, info.QueueID, info.QueueOffset+1)
		off += int64(info.Size)
		ts, seen = info.StoreTimestamp, true
	}
	return off, ts, seen, nil
}
