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
// when the walk is not done for this append. With views the frame's bytes
// do not go through the fill buffer: only the partial record must fit.
func (l *Log) inlineStart(seg *segment, mx int64, n int, views bool) (int, bool) {
	d := l.dispatched
	p := mx - d
	need := p + int64(n)
	if views {
		need = p
	}
	if l.stalled || d < seg.start || p < 0 || need > fillChunk {
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

// Inline dispatch of views. When AppendAtFrom writes from its reader's
// memory (views of a slave's read-ahead ring) there is no copy of the
// frame in the fill buffer to walk when the append is published: the
// views are walked as they come, while they are valid, and what the walk
// finds is applied under mu when the append is published (or dropped, as
// the copied walk's is, when the dispatched offset moved meanwhile). A
// record that lies inside one view is walked there; a record that
// continues past a view's end (one per frame, since frames cut records
// anywhere) is copied into the fill buffer behind the pending bytes, and
// walked there once the following views have completed it.

// viewWalk is the state of one AppendAtFrom's inline walk of views.
type viewWalk struct {
	on    bool  // walking: inline, and no bad or oversized record yet
	base  int64 // the log offset the walk reached: a record's start
	pend  int   // bytes from base on held at the front of the fill buffer
	ts    int64 // the last walked record's store timestamp, if hasTS
	hasTS bool
	err   error     // why the walk stopped at bytes that are not records
	ups   []queueUp // queue table updates, in log order
	names []byte    // their topics
}

// queueUp is one queue table update of a viewWalk: topic
// names[t0:t1], queue qid, next queue offset next.
type queueUp struct {
	t0, t1 int
	qid    int32
	next   int64
}

// start begins a walk at base with pend bytes of a partial record at the
// front of the fill buffer (walking only if on).
func (w *viewWalk) start(on bool, base int64, pend int) {
	w.on, w.base, w.pend = on, base, pend
	w.ts, w.hasTS, w.err = 0, false, nil
	w.ups, w.names = w.ups[:0], w.names[:0]
}

// set records a queue table update; consecutive records of one queue
// (a catch-up's usual stream) keep one entry.
func (w *viewWalk) set(topic []byte, qid int32, next int64) {
	if k := len(w.ups) - 1; k >= 0 {
		if u := &w.ups[k]; u.qid == qid && string(w.names[u.t0:u.t1]) == string(topic) {
			u.next = next
			return
		}
	}
	t0 := len(w.names)
	w.names = append(w.names, topic...)
	w.ups = append(w.ups, queueUp{t0: t0, t1: len(w.names), qid: qid, next: next})
}

// walked takes a walkSpan result: the walk reached to.
func (w *viewWalk) walked(to, ts int64, hasTS bool, err error) {
	w.base = to
	if hasTS {
		w.ts, w.hasTS = ts, true
	}
	if err != nil {
		w.err, w.on = err, false
	}
}

// walkView walks v, the log's bytes that follow the walk's pending bytes
// (from w.base+w.pend on), in seg: it completes the pending record from
// v's first bytes, walks the whole records inside v in place and keeps
// the partial record v ends with at the front of the fill buffer. A
// partial record larger than the fill buffer ends the walk (the
// dispatcher takes over from its start).
func (l *Log) walkView(w *viewWalk, v []byte, seg *segment) {
	segEnd := seg.end()
	for len(v) > 0 && w.on {
		if w.pend > 0 {
			take := min(pendingNeed(l.fillBuf[:w.pend], w.base, segEnd), int64(len(v)))
			if int64(w.pend)+take > int64(len(l.fillBuf)) {
				w.on = false
				return
			}
			w.pend += copy(l.fillBuf[w.pend:], v[:take])
			v = v[take:]
			to, ts, ok, err := walkSpan(l.fillBuf[:w.pend], w.base, segEnd, w.base+int64(w.pend), seg.path, w.set)
			k := int(to - w.base)
			w.walked(to, ts, ok, err)
			switch {
			case !w.on:
				return
			case k == 0 && take == 0:
				w.on = false // cannot happen: a record needs no bytes yet is not walked
				return
			}
			w.pend = copy(l.fillBuf, l.fillBuf[k:w.pend])
			continue
		}
		off := w.base
		to, ts, ok, err := walkSpan(v, off, segEnd, off+int64(len(v)), seg.path, w.set)
		w.walked(to, ts, ok, err)
		if !w.on {
			return
		}
		rest := v[to-off:]
		if len(rest) > len(l.fillBuf) {
			w.on = false
			return
		}
		w.pend = copy(l.fillBuf, rest)
		return
	}
}

// pendingNeed returns how many more bytes the walk needs behind b, the
// bytes of a partial record at offset base of a segment ending at segEnd,
// before walkSpan can walk it (0: it can now, or will fail). It mirrors
// walkSpan's waiting: a segment tail shorter than a filler and a filler
// run to the segment's end; a record header needs record.FillerSize
// bytes, then its TOTALSIZE.
func pendingNeed(b []byte, base, segEnd int64) int64 {
	p := int64(len(b))
	left := segEnd - base
	if left < record.FillerSize {
		return max(left-p, 0)
	}
	if p < record.FillerSize {
		return record.FillerSize - p
	}
	be := binary.BigEndian
	total := int64(int32(be.Uint32(b)))
	switch be.Uint32(b[4:]) {
	case record.MagicCode:
		if total >= record.MinRecordSize && total > p {
			return total - p
		}
	case record.BlankMagic:
		if total == left {
			return max(left-p, 0)
		}
	}
	return 0
}

// applyViewWalk publishes an AppendAtFrom's walk of views (mu held): the
// queue updates, the dispatched offset, and the pending bytes for the next
// append (none when the walk stopped early).
func (l *Log) applyViewWalk(w *viewWalk) {
	for _, u := range w.ups {
		l.queues.set(w.names[u.t0:u.t1], u.qid, u.next)
	}
	l.advanceDispatch(w.base, w.ts, w.hasTS, w.err)
	if !w.on {
		l.pendLen = 0
		return
	}
	l.pendOff, l.pendLen, l.pendGen = w.base, w.pend, l.truncGen.Load()
}
