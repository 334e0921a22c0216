package commitlog

import (
	"encoding/binary"
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
		end := min(mx, seg.end())
		to, t, s, err := walkSpan(seg.data[off-seg.start:end-seg.start], off, seg.end(), limit, seg.path, set)
		if s {
			ts, seen = t, true
		}
		if err != nil || to < seg.end() {
			return to, ts, seen, err
		}
		off = to
	}
	return off, ts, seen, nil
}

// walkSpan is walkRecords over b, the bytes of one segment (path, ending
// at offset segEnd) from offset base on: the mapping's, or the inline
// dispatch's copy of them in user memory. A filler or a tail shorter than
// a filler ends the segment only when b reaches segEnd.
func walkSpan(b []byte, base, segEnd, limit int64, path string, set func(topic []byte, qid int32, next int64)) (int64, int64, bool, error) {
	off, end, ts, seen := base, base+int64(len(b)), int64(0), false
	for off < end && off < limit {
		if segEnd-off < record.FillerSize {
			if end < segEnd {
				return off, ts, seen, nil
			}
			off = segEnd
			continue
		}
		if short(b[off-base:]) {
			return off, ts, seen, nil
		}
		info, err := record.VerifyHeader(b[off-base:])
		if errors.Is(err, record.ErrShort) {
			return off, ts, seen, nil
		}
		if err == nil && info.Filler && int64(info.Size) != segEnd-off {
			err = fmt.Errorf("filler of %d bytes with %d left", info.Size, segEnd-off)
		}
		if err != nil {
			return off, ts, seen, fmt.Errorf("%s at %d: %w", path, off, err)
		}
		if info.Filler {
			if end < segEnd {
				return off, ts, seen, nil
			}
			off = segEnd
			continue
		}
		set(info.Topic, info.QueueID, info.QueueOffset+1)
		off += int64(info.Size)
		ts, seen = info.StoreTimestamp, true
	}
	return off, ts, seen, nil
}

// short reports, without building an error, what record.VerifyHeader
// reports as record.ErrShort for a message record: b ends before the
// header or before the TOTALSIZE a valid magic code and length declare. A
// walk over the bytes a frame delivered ends at such a partial record
// once per frame; VerifyHeader's wrapped error there cost a formatted
// allocation each time (docs/benchmarks.md). Anything else is left to
// VerifyHeader, so errors and fillers are judged in one place.
func short(b []byte) bool {
	if len(b) < record.FillerSize {
		return true
	}
	be := binary.BigEndian
	total := int32(be.Uint32(b))
	return be.Uint32(b[4:]) == record.MagicCode && total >= record.MinRecordSize && int64(total) > int64(len(b))
}

// Inline dispatch. A catch-up's frames reach AppendAtFrom one after the
// other, each read into the log's fill buffer before it is written to the
// segment file: the bytes are in user memory (and in the CPU's cache)
// right then. AppendAtFrom reads each frame behind the part of a record
// the previous frame ended with (the pending bytes, kept at the front of
// the fill buffer) and walks the records there when it publishes, under
// mu, so that the dispatched offset follows the max offset without the
// dispatcher reading the segment through its mapping (a page fault for
// every fresh page, the largest cost of a catch-up's slave before this:
// docs/benchmarks.md). The background dispatcher stays for what the
// inline walk leaves: AppendAt's bytes, a record larger than the buffer,
// a log whose dispatch trails for another reason. Either advances the
// dispatched offset under mu from where it is, so neither can skip or
// repeat a record; a dispatcher round overtaken by the inline walk is
// discarded as after a truncation.

// inlineResync bounds the bytes below the max offset that AppendAtFrom
// copies from the mapping to start the inline walk when it has no pending
// bytes for them (after AppendAt, a restart, or a frame that did not fit).
const inlineResync = 64 << 10

// inlineStart prepares the inline walk of an n-byte AppendAtFrom at mx in
// seg (mu held): it returns how many bytes below mx (the dispatched
// offset's partial record) are at the front of the fill buffer, and false
// when the walk is not done for this append.
func (l *Log) inlineStart(seg *segment, mx int64, n int) (int, bool) {
	d := l.dispatched
	p := mx - d
	if l.stalled || d < seg.start || p < 0 || p+int64(n) > fillChunk {
		l.pendLen = 0
		return 0, false
	}
	if len(l.fillBuf) < fillChunk {
		l.fillBuf = make([]byte, fillChunk)
	}
	if l.pendGen != l.truncGen.Load() || l.pendOff != d || int64(l.pendLen) != p {
		if p > inlineResync {
			// Let the dispatcher catch up, whatever the lag, so that the
			// next append can start the inline walk again.
			l.pendLen = 0
			select {
			case l.dispatchKick <- struct{}{}:
			default:
			}
			return 0, false
		}
		copy(l.fillBuf, seg.data[d-seg.start:mx-seg.start])
	}
	return int(p), true
}

// inlineWalk dispatches the records of b, the bytes of seg from offset
// base (the dispatched offset) on, and keeps what follows the last whole
// record at the front of the fill buffer for the next append (mu held).
func (l *Log) inlineWalk(seg *segment, b []byte, base int64) {
	to, ts, ok, err := walkSpan(b, base, seg.end(), base+int64(len(b)), seg.path, l.queues.set)
	l.advanceDispatch(to, ts, ok, err)
	rest := b[to-base:]
	l.pendOff, l.pendLen, l.pendGen = to, copy(l.fillBuf, rest), l.truncGen.Load()
}
