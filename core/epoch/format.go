package epoch

import (
	"cmp"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"strconv"
)

// FileName is the epoch file's name inside the data directory, as in
// RocketMQ 5 (${storePathRootDir}/epochFileCheckpoint). The backup is
// FileName+BackupSuffix.
const FileName = "epochFileCheckpoint"

// BackupSuffix names the backup file: FileName+BackupSuffix holds the list
// the main file held before the last write.
const BackupSuffix = ".bak"

// tmpSuffix names the file a write is prepared in before it is renamed over
// the main file. A leftover one (a crash before the rename) is never read.
const tmpSuffix = ".tmp"

// Unbounded is the EndOffset of the last entry of a list: the current epoch
// has no end yet (RocketMQ's Long.MAX_VALUE).
const Unbounded int64 = math.MaxInt64

// MaxEntries bounds the count line of a file: Decode refuses a larger count
// before allocating anything. RocketMQ has no bound; a master's handshake
// carries at most 1000 entries, so a list this long is corrupt, not real.
const MaxEntries = 100_000

// MaxFileSize bounds the bytes Open reads: the count and CRC lines plus
// MaxEntries entry lines of the longest form ("2147483647-9223372036854775807\n",
// 31 bytes). A larger file is corrupt.
const MaxFileSize = 11 + 11 + MaxEntries*maxEntryLine

// maxEntryLine is the longest entry line including its separator.
const maxEntryLine = 10 + 1 + 19 + 1

// crcMask is RocketMQ's UtilAll.crc32 mask: the CRC-32 (IEEE) is stored as a
// non-negative Java int.
const crcMask = 0x7FFFFFFF

// noCheckCRC in the CRC line means "do not check" (RocketMQ's
// NOT_CHECK_CRC_MAGIC_CODE).
const noCheckCRC = 0

// lineSep is the line separator RocketMQ writes on Linux
// (System.lineSeparator()); the CRC covers every entry line followed by it.
const lineSep = '\n'

var (
	// ErrCorrupt is returned (wrapped, with the reason) by Decode for any
	// input that is not a valid epoch file, and by Open when neither the
	// main file nor the backup is valid.
	ErrCorrupt = errors.New("epoch: corrupt epoch file")
	// ErrNotNewer is returned (wrapped) by Append for an entry that does
	// not follow the last one: its epoch is not greater, or its start
	// offset is smaller.
	ErrNotNewer = errors.New("epoch: entry is not newer than the last entry")
	// ErrInvalid is returned (wrapped) by Append for a negative epoch or
	// start offset, which no file may hold.
	ErrInvalid = errors.New("epoch: negative epoch or start offset")
)

// Entry is one epoch: the master of Epoch wrote the commit-log bytes
// [StartOffset, EndOffset). EndOffset is the next entry's StartOffset, or
// Unbounded for the last entry (WithEnd sets a concrete one for
// comparisons). Only Epoch and StartOffset are stored in the file.
type Entry struct {
	Epoch       int32
	StartOffset int64
	EndOffset   int64
}

// Encode returns the file text of the list in RocketMQ's format: the count
// line, the masked CRC-32 line, then one "epoch-startOffset" line per entry,
// every line ending with "\n". An empty list encodes as "0\n0\n" (RocketMQ
// never writes one; see the package documentation). EndOffset is not
// stored. Encode does not validate; Decode(Encode(es)) fails for a list that
// breaks the ordering rules.
func Encode(es []Entry) []byte {
	body := make([]byte, 0, len(es)*16)
	for _, e := range es {
		body = strconv.AppendInt(body, int64(e.Epoch), 10)
		body = append(body, '-')
		body = strconv.AppendInt(body, e.StartOffset, 10)
		body = append(body, lineSep)
	}
	out := make([]byte, 0, len(body)+24)
	out = strconv.AppendInt(out, int64(len(es)), 10)
	out = append(out, lineSep)
	out = strconv.AppendUint(out, uint64(checksum(body)), 10)
	out = append(out, lineSep)
	return append(out, body...)
}

// checksum is RocketMQ's UtilAll.crc32: CRC-32 (IEEE) masked to 31 bits.
func checksum(b []byte) uint32 {
	return crc32.ChecksumIEEE(b) & crcMask
}

// Decode parses an epoch file. It accepts exactly what Encode writes for a
// valid list (plus a CRC line of 0, which RocketMQ reads as "do not check")
// and refuses everything else with an error wrapping ErrCorrupt: a count
// above MaxEntries or not matching the entry lines, a CRC mismatch, numbers
// that are not canonical non-negative decimals or overflow, a line without
// its "\n", empty lines, "\r", epochs not strictly ascending, start offsets
// decreasing. The returned entries have their EndOffsets set (the last one
// Unbounded).
func Decode(b []byte) ([]Entry, error) {
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrCorrupt, len(b), MaxFileSize)
	}
	countLine, rest, err := nextLine(b, 1)
	if err != nil {
		return nil, err
	}
	count, err := parseDecimal(countLine, MaxEntries)
	if err != nil {
		return nil, fmt.Errorf("%w: line 1 (count): %w", ErrCorrupt, err)
	}
	crcLine, body, err := nextLine(rest, 2)
	if err != nil {
		return nil, err
	}
	wantCRC, err := parseDecimal(crcLine, crcMask)
	if err != nil {
		return nil, fmt.Errorf("%w: line 2 (crc): %w", ErrCorrupt, err)
	}
	// Every entry line is at least "0-0\n": a count the remaining bytes
	// cannot hold is refused before allocating for it.
	if count > int64(len(body)/4) {
		return nil, fmt.Errorf("%w: count %d, but only %d bytes of entries", ErrCorrupt, count, len(body))
	}
	es := make([]Entry, 0, count)
	rest = body
	for lineNo := 3; len(rest) > 0; lineNo++ {
		var line []byte
		line, rest, err = nextLine(rest, lineNo)
		if err != nil {
			return nil, err
		}
		e, err := parseEntry(line)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", ErrCorrupt, lineNo, err)
		}
		if int64(len(es)) == count {
			return nil, fmt.Errorf("%w: count %d, more entry lines follow", ErrCorrupt, count)
		}
		if n := len(es); n > 0 {
			prev := es[n-1]
			if e.Epoch <= prev.Epoch {
				return nil, fmt.Errorf("%w: line %d: epoch %d after epoch %d (not ascending)", ErrCorrupt, lineNo, e.Epoch, prev.Epoch)
			}
			if e.StartOffset < prev.StartOffset {
				return nil, fmt.Errorf("%w: line %d: start offset %d after %d (decreasing)", ErrCorrupt, lineNo, e.StartOffset, prev.StartOffset)
			}
		}
		es = append(es, e)
	}
	if int64(len(es)) != count {
		return nil, fmt.Errorf("%w: count %d, found %d entries", ErrCorrupt, count, len(es))
	}
	if wantCRC != noCheckCRC {
		if got := checksum(body); int64(got) != wantCRC {
			return nil, fmt.Errorf("%w: crc %d, entries have %d", ErrCorrupt, wantCRC, got)
		}
	}
	setEnds(es, Unbounded)
	return es, nil
}

// nextLine splits b at the first "\n" within the longest line Decode
// accepts; the line must end with "\n".
func nextLine(b []byte, lineNo int) (line, rest []byte, err error) {
	for i := 0; i < len(b) && i <= maxEntryLine; i++ {
		if b[i] == lineSep {
			return b[:i], b[i+1:], nil
		}
	}
	if len(b) > maxEntryLine {
		return nil, nil, fmt.Errorf("%w: line %d longer than %d bytes", ErrCorrupt, lineNo, maxEntryLine)
	}
	return nil, nil, fmt.Errorf("%w: line %d: missing line separator", ErrCorrupt, lineNo)
}

// parseEntry parses "epoch-startOffset".
func parseEntry(line []byte) (Entry, error) {
	dash := -1
	for i, c := range line {
		if c == '-' {
			dash = i
			break
		}
	}
	if dash < 0 {
		return Entry{}, fmt.Errorf("%q is not epoch-startOffset", line)
	}
	ep, err := parseDecimal(line[:dash], math.MaxInt32)
	if err != nil {
		return Entry{}, fmt.Errorf("epoch: %w", err)
	}
	start, err := parseDecimal(line[dash+1:], math.MaxInt64)
	if err != nil {
		return Entry{}, fmt.Errorf("start offset: %w", err)
	}
	return Entry{Epoch: int32(ep), StartOffset: start}, nil
}

// parseDecimal parses a canonical non-negative decimal (no sign, no leading
// zero, at least one digit) no greater than max.
func parseDecimal(s []byte, max int64) (int64, error) {
	if len(s) == 0 {
		return 0, errors.New("empty number")
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("%q has a leading zero", s)
	}
	var v int64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not a non-negative decimal", s)
		}
		d := int64(c - '0')
		if v > (max-d)/10 {
			return 0, fmt.Errorf("%q is above %d", s, max)
		}
		v = v*10 + d
	}
	return v, nil
}

// setEnds sets every entry's EndOffset to the next entry's StartOffset and
// the last one's to last, or to its StartOffset when last is smaller (an
// end never precedes its start).
func setEnds(es []Entry, last int64) {
	for i := range es {
		if i+1 < len(es) {
			es[i].EndOffset = es[i+1].StartOffset
			continue
		}
		es[i].EndOffset = max(last, es[i].StartOffset)
	}
}

// WithEnd returns a copy of es with every EndOffset recomputed from the
// next entry's StartOffset and the last EndOffset set to max (clamped to
// that entry's StartOffset if max is smaller), the form ConsistentPoint
// compares: the local list with the local max offset, the master's list
// with the master's max offset.
func WithEnd(es []Entry, max int64) []Entry {
	out := append([]Entry(nil), es...)
	setEnds(out, max)
	return out
}

// ConsistentPoint is RocketMQ's findConsistentPoint: it walks the local
// entries from the highest epoch down and, at the first one whose epoch the
// master also has with the same StartOffset, returns the smaller of the two
// entries' EndOffsets: the offset up to which both logs hold the same
// epochs. It returns -1 when no epoch matches (or either list is empty).
// Pass both lists through WithEnd first (local max, master max); the
// EndOffsets are used as given.
func ConsistentPoint(local, master []Entry) int64 {
	if len(local) == 0 || len(master) == 0 {
		return -1
	}
	byEpoch := make(map[int32]Entry, len(master))
	for _, e := range master {
		if _, dup := byEpoch[e.Epoch]; !dup {
			byEpoch[e.Epoch] = e
		}
	}
	// Highest epoch first, whatever order the caller's list is in.
	walk := slices.Clone(local)
	slices.SortStableFunc(walk, func(a, b Entry) int { return cmp.Compare(b.Epoch, a.Epoch) })
	for _, l := range walk {
		m, ok := byEpoch[l.Epoch]
		if ok && m.StartOffset == l.StartOffset {
			return min(l.EndOffset, m.EndOffset)
		}
	}
	return -1
}
