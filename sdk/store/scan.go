package store

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/replicatorhq/replicator/sdk/record"
)

// scanWindow bounds how many bytes ScanRecords asks one Read for: a
// mapped log hands out views for free, but a log that copies (a plugin's
// over a stream) should not be asked for a whole segment at once.
const scanWindow = 4 << 20

// ScanRecords walks the records of l from offset from, a record boundary,
// over Read views, and returns the last record boundary at or below to
// that it reached, with the number of records (fillers not counted)
// between from and it. It finds record boundaries for whoever holds only
// the byte log (core's slave side: the consistent point, a partial record
// to cut, whether the log ends at a boundary) without decoding messages.
//
// The walk follows the log's segments (Bounds.SegmentStart): an
// end-of-file filler, or a segment tail shorter than a filler, moves it to
// the next segment. It stops, without an error, at to, at the max offset
// it saw when it started, or at a record (or filler) that the log ends
// inside of: a torn tail, or a replica's record still in transfer. Each
// record it stops at or passes is verified first (record.Verify: lengths,
// magic code, BODYCRC, and PHYSICALOFFSET equal to its offset), also the
// one that ends past to. Bytes at from that are not a record give an error
// wrapping ErrNotBoundary; bad bytes later give one wrapping ErrCorrupt
// (with the record package's error). An offset outside [Min, Max] gives
// ErrOffsetOutOfRange; an error from Read is returned wrapped.
//
// It allocates only for a record that no single view holds (a copy of
// that record), and holds at most one view at a time.
func ScanRecords(l Log, from, to int64) (end int64, records int, err error) {
	b := l.Bounds()
	if from < b.Min || from > b.Max {
		return from, 0, fmt.Errorf("store: scan records at %d: %w: log holds [%d, %d]", from, ErrOffsetOutOfRange, b.Min, b.Max)
	}
	s := scanner{l: l}
	defer s.v.Release()
	off := from
	for off < b.Max && off <= to {
		segEnd := int64(math.MaxInt64)
		if b.SegmentSize > 0 {
			segEnd = b.SegmentStart(off) + b.SegmentSize
		}
		avail := min(b.Max, segEnd) - off
		if segEnd-off < record.FillerSize {
			// Too few bytes for a filler: the segment's unused tail.
			if b.Max < segEnd || segEnd > to {
				break
			}
			off = segEnd
			continue
		}
		if avail < record.FillerSize {
			break // the log ends inside a header
		}
		hdr, err := s.at(off, record.FillerSize, avail)
		if err != nil {
			return off, records, err
		}
		size := int64(int32(binary.BigEndian.Uint32(hdr)))
		magic := binary.BigEndian.Uint32(hdr[4:])
		if magic == record.BlankMagic {
			if size != segEnd-off {
				return off, records, s.bad(off, from, fmt.Errorf("%w: filler of %d bytes with %d left in the segment", record.ErrBadLength, size, segEnd-off))
			}
			if b.Max < segEnd || segEnd > to {
				break
			}
			off = segEnd
			continue
		}
		rec := hdr // a bad magic code or TOTALSIZE: Verify says which
		if magic == record.MagicCode && size >= record.MinRecordSize {
			if size > avail {
				// The log ends inside this record (or it claims more than
				// its segment holds): a torn tail, as ReadMessages has it.
				break
			}
			if rec, err = s.at(off, int(size), avail); err != nil {
				return off, records, err
			}
		}
		info, err := record.Verify(rec)
		if err == nil && info.PhysicalOffset != off {
			err = fmt.Errorf("%w: PHYSICALOFFSET %d", record.ErrBadLength, info.PhysicalOffset)
		}
		if err != nil {
			return off, records, s.bad(off, from, err)
		}
		if off+size > to {
			break
		}
		off += size
		records++
	}
	return off, records, nil
}

// scanner reads the bytes ScanRecords verifies: from the view it holds,
// else from a new one, else (a record split across views) as a copy.
type scanner struct {
	l   Log
	v   View
	buf []byte
}

// at returns the n bytes at off (n <= avail, the bytes stored from off up
// to the segment end or the max offset).
func (s *scanner) at(off int64, n int, avail int64) ([]byte, error) {
	if p := off - s.v.Offset; len(s.v.Data) > 0 && p >= 0 && p+int64(n) <= int64(len(s.v.Data)) {
		return s.v.Data[p : p+int64(n)], nil
	}
	s.v.Release()
	want := int(min(avail, max(int64(n), scanWindow)))
	v, err := s.l.Read(off, want)
	if err != nil {
		return nil, fmt.Errorf("store: scan records: read at %d: %w", off, err)
	}
	s.v = v
	if len(v.Data) >= n {
		return v.Data[:n], nil
	}
	s.buf = append(s.buf[:0], v.Data...)
	for len(s.buf) < n {
		at := off + int64(len(s.buf))
		more, err := s.l.Read(at, n-len(s.buf))
		if err != nil {
			return nil, fmt.Errorf("store: scan records: read at %d: %w", at, err)
		}
		got := len(more.Data)
		s.buf = append(s.buf, more.Data[:min(got, n-len(s.buf))]...)
		more.Release()
		if got == 0 {
			return nil, fmt.Errorf("store: scan records: read at %d returned nothing below the max offset: %w", at, ErrCorrupt)
		}
	}
	return s.buf[:n], nil
}

// bad wraps err, the bytes at off not being a record, with ErrNotBoundary
// at the walk's first position and ErrCorrupt after it.
func (s *scanner) bad(off, from int64, err error) error {
	kind := ErrCorrupt
	if off == from {
		kind = ErrNotBoundary
	}
	return fmt.Errorf("store: scan records at %d: %w: %w", off, kind, err)
}
