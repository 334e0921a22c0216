package commitlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/replicatorhq/replicator/plugins/commitlog/vfs"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

var zeroPage = make([]byte, 1<<16)

func isZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeroPage))
		if !bytes.Equal(b[:n], zeroPage[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// recover loads the segment files, checks their names and sizes, scans
// the tail for the last valid record and cuts whatever follows it (see
// doc.go, "Recovery").
func (l *Log) recover() error {
	segs, err := l.loadSegments()
	if err != nil {
		return err
	}
	l.segs.Store(&segs)
	l.m.segments.Set(float64(len(segs)))
	ck, cerr := readCheckpoint(l.fs, l.ckptPath)
	if cerr == nil {
		if why := brokerRanSince(l.fs, l.root, l.ckptPath); why != "" {
			cerr = fmt.Errorf("%w: %s", errBrokerRan, why)
		}
	}
	if len(segs) == 0 {
		if cerr == nil && ck.Flushed > 0 {
			l.log.Warn("no segment files; ignoring the checkpoint", "checkpoint", l.ckptPath, "flushed", ck.Flushed)
		}
		l.lastCkpt = checkpoint{Flushed: -1}
		return l.checkpointNow(false)
	}
	first, end := segs[0].start, segs[len(segs)-1].end()
	useCk := cerr == nil && ck.Scan >= first && ck.Scan <= end && ck.Flushed <= end
	switch {
	case cerr != nil && !isNotExist(cerr):
		l.log.Warn("checkpoint unusable; scanning the last 3 segments", "checkpoint", l.ckptPath, "error", cerr)
	case cerr == nil && !useCk:
		l.log.Warn("checkpoint does not match the segment files; scanning the last 3 segments",
			"checkpoint", l.ckptPath, "scan", ck.Scan, "flushed", ck.Flushed, "min", first, "end", end)
	}
	v3 := segs[max(0, len(segs)-3)].start
	var table queueTable
	var scanAt, flushed, from int64
	if useCk {
		table, scanAt, flushed, l.lastTS = ck.Queues, ck.Scan, ck.Flushed, ck.Timestamp
		from = min(scanAt, v3)
	} else {
		table = queueTable{}
		if err := l.walkHeaders(first, v3, table); err != nil {
			return err
		}
		scanAt, flushed, from = v3, v3, v3
	}
	p, stopErr, claimed := l.scan(from, scanAt, table, flushed, useCk && ck.Clean)
	l.queues = table
	if p < end {
		seg, k := segmentFor(segs, p)
		if useCk && p < scanAt {
			return corruptf(seg.path, p, stopErr, "record below the checkpoint's scan offset %d does not verify", scanAt)
		}
		if p < flushed {
			// A replica's flushed offset may fall inside a record (chunks cut
			// records anywhere): a record whose header or claimed size
			// reaches past it is torn, not corrupt.
			straddle := flushed-p < record.FillerSize || stopErr != nil && claimed > 0 && p+claimed > flushed && p+claimed <= seg.end()
			if !straddle {
				if stopErr == nil {
					stopErr = errors.New("no record where the log continues")
				}
				return corruptf(seg.path, p, stopErr, "record below the flushed offset %d does not verify", flushed)
			}
		}
		if !useCk && stopErr != nil {
			for _, later := range segs[k+1:] {
				if !isZero(later.data[:record.FillerSize]) {
					return corruptf(seg.path, p, stopErr, "record does not verify and %s after it holds data", filepath.Base(later.path))
				}
			}
		}
		// The checkpoint's scan offset (p) must not pass its flushed
		// offset: make the verified records below p durable first, or the
		// checkpoint is one the next Open refuses, and a crash before the
		// one written below leaves recovery without it.
		if p > flushed {
			l.flushed.Store(flushed)
			if err := l.flushTo(p); err != nil {
				return fmt.Errorf("commitlog: recovery: flushing the recovered records: %w", err)
			}
			flushed = p
		}
		c := checkpoint{Flushed: min(flushed, p), Scan: p, Timestamp: l.lastTS, Queues: table}
		if err := l.writeCheckpoint(&c); err != nil {
			return err
		}
		l.lastCkpt = c
		cut, err := l.cutTail(p, -1)
		if err != nil {
			return err
		}
		if cut {
			reason := "end of data"
			if stopErr != nil {
				reason = stopErr.Error()
			}
			l.log.Warn("recovery truncated the torn tail", "file", seg.path, "offset", p, "reason", reason)
			l.m.truncations.Inc()
		}
	}
	l.max.Store(p)
	l.dispatched = p
	l.flushed.Store(min(flushed, p))
	l.m.maxOffset.Set(float64(p))
	l.log.Info("recovered", "min", first, "max", p, "segments", len(l.segList()), "from_checkpoint", useCk, "clean", useCk && ck.Clean)
	// Always rewrite the checkpoint: the one on disk may say "clean", which
	// stops being true with the first append.
	l.lastCkpt = checkpoint{Flushed: -1}
	return l.checkpointNow(false)
}

// loadSegments lists, checks and maps the segment files in order.
func (l *Log) loadSegments() ([]*segment, error) {
	entries, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return nil, fmt.Errorf("commitlog: open: %w", err)
	}
	var starts []int64
	for _, e := range entries {
		name := e.Name()
		if strings.HasSuffix(name, ".tmp") {
			if _, ok := store.ParseSegmentName(strings.TrimSuffix(name, ".tmp")); ok {
				// An unused spare left by an older replicator, which
				// preallocated here (now in allocDirName).
				l.log.Info("removing an unused preallocated segment", "file", name)
				l.fs.Remove(filepath.Join(l.dir, name))
				continue
			}
		}
		start, ok := store.ParseSegmentName(name)
		if !ok {
			if strings.Trim(name, "0123456789") == "" {
				return nil, corruptf(filepath.Join(l.dir, name), -1, nil, "segment name is not 20 digits")
			}
			l.log.Warn("ignoring a file that is not a segment", "file", name)
			continue
		}
		if !e.Type().IsRegular() {
			return nil, corruptf(filepath.Join(l.dir, name), -1, nil, "segment is not a regular file")
		}
		starts = append(starts, start)
	}
	slices.Sort(starts)
	size := l.opts.SegmentSize
	// RocketMQ: a zero-length last file is deleted (a crash while creating it).
	for len(starts) > 0 {
		path := segmentPath(l.dir, starts[len(starts)-1])
		fi, err := l.fs.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("commitlog: open: %w", err)
		}
		if fi.Size() != 0 {
			break
		}
		l.log.Warn("deleting a zero-length last segment", "file", path)
		if err := l.fs.Remove(path); err != nil {
			return nil, fmt.Errorf("commitlog: open: %w", err)
		}
		starts = starts[:len(starts)-1]
	}
	if found, ok := uniformSize(l.fs, l.dir, starts); ok && found != size {
		return nil, &SegmentSizeError{Dir: l.dir, Found: found, Configured: size}
	}
	for i, st := range starts {
		path := segmentPath(l.dir, st)
		fi, err := l.fs.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("commitlog: open: %w", err)
		}
		switch {
		case fi.Size() != size:
			return nil, corruptf(path, -1, nil, "file is %d bytes, segments are %d", fi.Size(), size)
		case st%size != 0:
			return nil, corruptf(path, -1, nil, "start offset is not a multiple of the segment size %d", size)
		case i > 0 && st != starts[i-1]+size:
			return nil, corruptf(path, -1, nil, "previous segment starts at %d: segments must be consecutive", starts[i-1])
		}
	}
	segs := make([]*segment, 0, len(starts))
	for _, st := range starts {
		s, err := openSegment(l.fs, segmentPath(l.dir, st), st, size, l.log)
		if err != nil {
			for _, o := range segs {
				o.Release()
			}
			return nil, err
		}
		segs = append(segs, s)
	}
	return segs, nil
}

// uniformSize reports the size of the segment files when they form a
// whole log with a segment size of their own: every file that size (a
// page multiple, at least MinSegmentSize), starts multiples of it and
// consecutive. Open then says "written with another segment size" rather
// than "corrupt".
func uniformSize(fsys vfs.FS, dir string, starts []int64) (int64, bool) {
	size := int64(-1)
	for i, st := range starts {
		fi, err := fsys.Stat(segmentPath(dir, st))
		if err != nil {
			return 0, false
		}
		if i == 0 {
			size = fi.Size()
			if size < MinSegmentSize || size%pageSize != 0 {
				return 0, false
			}
		}
		if fi.Size() != size || st%size != 0 || i > 0 && st != starts[i-1]+size {
			return 0, false
		}
	}
	return size, size > 0
}

// walkHeaders rebuilds the queue table over [from, to) (to a segment
// start) from record headers alone; anything that is not a record there is
// corruption, since later segments hold data.
func (l *Log) walkHeaders(from, to int64, table queueTable) error {
	segs := l.segList()
	pos := from
	for pos < to {
		seg, _ := segmentFor(segs, pos)
		off := pos - seg.start
		if seg.size-off < record.FillerSize {
			pos = seg.end()
			continue
		}
		info, err := record.VerifyHeader(seg.data[off:])
		if err == nil && info.Filler && int64(info.Size) != seg.size-off {
			err = fmt.Errorf("%w: filler declares %d bytes, %d left", record.ErrBadLength, info.Size, seg.size-off)
		}
		if err == nil && !info.Filler && info.PhysicalOffset != pos {
			err = fmt.Errorf("%w: PHYSICALOFFSET %d", record.ErrBadLength, info.PhysicalOffset)
		}
		if err != nil {
			return corruptf(seg.path, pos, err, "record header in a sealed segment does not verify")
		}
		if info.Filler {
			seg.release(0, seg.size)
			pos = seg.end()
			continue
		}
		table.set(info.Topic, info.QueueID, info.QueueOffset+1)
		pos += int64(info.Size)
		if pos == seg.end() {
			seg.release(0, seg.size)
		}
	}
	return nil
}

// scan verifies records (TOTALSIZE, MAGICCODE, lengths, BODYCRC and
// PHYSICALOFFSET) from `from` and applies those at or after applyFrom to
// table. It returns the end p of the valid records, why it stopped (nil at
// zeros or at the end of the last segment), and the TOTALSIZE claimed by
// an invalid record whose magic is valid (0 otherwise).
//
// Past the flushed offset it is stricter, because BODYCRC covers only the
// body: after a clean shutdown no record may end past it, and otherwise a
// record whose last byte is a zero where RocketMQ never writes one (the
// end of a non-empty property list or of a topic) is a torn write.
func (l *Log) scan(from, applyFrom int64, table queueTable, flushed int64, clean bool) (p int64, stopErr error, claimed int64) {
	segs := l.segList()
	pos := from
	for {
		seg, i := segmentFor(segs, pos)
		if seg == nil {
			return pos, nil, 0
		}
		off := pos - seg.start
		rest := seg.size - off
		if rest < record.FillerSize {
			if i+1 < len(segs) {
				pos = seg.end()
				continue
			}
			return pos, nil, 0
		}
		b := seg.data[off:]
		if isZero(b[:record.FillerSize]) {
			return pos, nil, 0
		}
		info, err := record.Verify(b)
		switch {
		case err != nil:
		case info.Filler && int64(info.Size) != rest:
			err = fmt.Errorf("%w: filler declares %d bytes, %d left", record.ErrBadLength, info.Size, rest)
		case info.Filler && clean && seg.end() > flushed:
			err = fmt.Errorf("filler past the clean end %d", flushed)
		case info.Filler:
		case info.PhysicalOffset != pos:
			err = fmt.Errorf("%w: PHYSICALOFFSET %d (a stale or misplaced record)", record.ErrBadLength, info.PhysicalOffset)
		case pos+int64(info.Size) > flushed && clean:
			err = fmt.Errorf("record ends at %d, past the clean end %d", pos+int64(info.Size), flushed)
		case pos+int64(info.Size) > flushed && record.TornTail(b[:info.Size], info):
			err = fmt.Errorf("record past the flushed offset %d ends in a zero byte: torn", flushed)
		}
		if err != nil {
			if m := binary.BigEndian.Uint32(b[4:]); m == record.MagicCode || m == record.BlankMagic {
				claimed = int64(int32(binary.BigEndian.Uint32(b)))
			}
			return pos, err, claimed
		}
		if info.Filler {
			pos = seg.end()
			continue
		}
		if pos >= applyFrom {
			table.set(info.Topic, info.QueueID, info.QueueOffset+1)
			l.lastTS = info.StoreTimestamp
		}
		pos += int64(info.Size)
	}
}

// cutTail makes p the end of the log: it zeroes the bytes from p to the
// end of p's segment (only [p, knownEnd) when knownEnd >= 0: bytes past it
// are known to be zero) and msyncs them, then removes every later segment,
// last first, fsyncing the directory after each, so that a crash at any
// step leaves a log whose recovery ends at p. A segment that would be left
// empty is removed too, unless it is the first. The caller has already
// written a checkpoint whose scan offset is <= p. Reports whether
// anything changed. mu held (or recovery).
func (l *Log) cutTail(p, knownEnd int64) (bool, error) {
	segs := l.segList()
	seg, k := segmentFor(segs, p)
	if seg == nil {
		return false, nil
	}
	keep := k + 1
	changed := false
	if p == seg.start && k > 0 {
		keep = k
	} else if knownEnd >= 0 {
		if err := seg.zeroRange(p-seg.start, knownEnd-seg.start); err != nil {
			return false, err
		}
		changed = knownEnd > p
	} else {
		hi, err := seg.zeroFrom(p - seg.start)
		if err != nil {
			return false, err
		}
		changed = hi > p-seg.start
		seg.release(p-seg.start, seg.size)
	}
	for j := len(segs) - 1; j >= keep; j-- {
		s := segs[j]
		path := s.path
		rest := segs[:j:j]
		l.segs.Store(&rest)
		s.Release()
		if err := l.fs.Remove(path); err != nil {
			return changed, fmt.Errorf("commitlog: remove %s: %w", path, err)
		}
		if err := syncDir(l.fs, l.dir); err != nil {
			return changed, err
		}
		changed = true
	}
	l.m.segments.Set(float64(len(l.segList())))
	return changed, nil
}
