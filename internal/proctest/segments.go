package proctest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/replicatorhq/replicator/plugins/commitlog"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// ReadRange reads [lo, hi) (absolute offsets) of a commit log made of
// segSize segment files in dir.
func ReadRange(dir string, segSize, lo, hi int64) ([]byte, error) {
	out := make([]byte, 0, hi-lo)
	for off := lo; off < hi; {
		start := off - off%segSize
		end := min(hi, start+segSize)
		path := filepath.Join(dir, store.SegmentName(start))
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("proctest: %w", err)
		}
		buf := make([]byte, end-off)
		_, err = f.ReadAt(buf, off-start)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("proctest: reading %s [%d, %d): %w", path, off-start, end-start, err)
		}
		out = append(out, buf...)
		off = end
	}
	return out, nil
}

// CompareCommitLogs checks that the commit-log directories a and b hold
// the same bytes in [lo, hi) and returns how many segment files it
// compared.
func CompareCommitLogs(a, b string, segSize, lo, hi int64) (int, error) {
	files := 0
	for off := lo; off < hi; {
		start := off - off%segSize
		end := min(hi, start+segSize)
		da, err := ReadRange(a, segSize, off, end)
		if err != nil {
			return files, err
		}
		db, err := ReadRange(b, segSize, off, end)
		if err != nil {
			return files, err
		}
		if !bytes.Equal(da, db) {
			i := 0
			for i < len(da) && da[i] == db[i] {
				i++
			}
			return files, fmt.Errorf("proctest: %s and %s differ at offset %d", a, b, off+int64(i))
		}
		files++
		off = end
	}
	return files, nil
}

// ScanEnd walks the records of a commit log from its first segment, the
// way recovery's scan does (verifying each record, following end-of-file
// fillers, taking a record whose last bytes are still zero for a torn
// write: record.TornTail), and returns the offset after the last whole
// record and the number of records. It stops at the first position that
// is not a whole record.
func ScanEnd(dir string, segSize int64) (end int64, records int, err error) {
	starts, err := commitlog.SegmentStarts(dir)
	if err != nil || len(starts) == 0 {
		return 0, 0, err
	}
	end = starts[0]
	for i, start := range starts {
		if start != end {
			return end, records, nil
		}
		data, err := os.ReadFile(filepath.Join(dir, store.SegmentName(start)))
		if err != nil {
			return end, records, fmt.Errorf("proctest: %w", err)
		}
		pos := int64(0)
		for pos < int64(len(data)) {
			if int64(len(data))-pos < record.FillerSize {
				pos = int64(len(data))
				break
			}
			if rem, ok := record.IsFiller(data[pos:]); ok {
				if int64(rem) != int64(len(data))-pos {
					return start + pos, records, nil
				}
				pos = int64(len(data))
				break
			}
			info, err := record.Verify(data[pos:])
			if err != nil || info.PhysicalOffset != start+pos || record.TornTail(data[pos:pos+int64(info.Size)], info) {
				return start + pos, records, nil
			}
			pos += int64(info.Size)
			records++
		}
		end = start + pos
		if i == len(starts)-1 || pos < segSize {
			return end, records, nil
		}
	}
	return end, records, nil
}
