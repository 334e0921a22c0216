package store

import (
	"fmt"
	"strconv"
)

// SegmentNameLen is the length of a segment file's name.
const SegmentNameLen = 20

// SegmentName is the file name of the segment that starts at offset start
// in RocketMQ's store layout (UtilAll.offset2FileName): the offset in
// SegmentNameLen zero-padded decimal digits, e.g. 00000000001073741824.
func SegmentName(start int64) string { return fmt.Sprintf("%0*d", SegmentNameLen, start) }

// ParseSegmentName returns the start offset that a segment file's name
// stands for, or false when the name is not SegmentNameLen decimal digits.
func ParseSegmentName(name string) (int64, bool) {
	if len(name) != SegmentNameLen {
		return 0, false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(name, 10, 64)
	return v, err == nil
}

// SegmentStart is the start of the segment that holds offset off:
// segments are SegmentSize bytes long and one of them starts at
// LastSegmentStart (for RocketMQ's layout, whose file names are multiples
// of the segment size, this is off - off%SegmentSize). Without a segment
// size (SegmentSize <= 0) it is Min.
func (b Bounds) SegmentStart(off int64) int64 {
	seg := b.SegmentSize
	if seg <= 0 {
		return b.Min
	}
	d := (off - b.LastSegmentStart) % seg
	if d < 0 {
		d += seg
	}
	return off - d
}
