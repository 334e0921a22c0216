package commitlog

import (
	"errors"
	"fmt"

	"github.com/replicatorhq/replicator/sdk/store"
)

// CorruptError marks corruption: a record in the middle of the log that
// does not verify, or segment files whose names or sizes do not form a log.
// It wraps store.ErrCorrupt and the codec error that found it, and names
// the file and the offset. A torn tail is not corruption: recovery cuts it.
type CorruptError struct {
	File   string // segment or checkpoint path
	Offset int64  // physical offset (or -1 when about a file as a whole)
	Reason string
	Err    error // underlying error, may be nil
}

func (e *CorruptError) Error() string {
	msg := fmt.Sprintf("commitlog: corrupt commit log: %s", e.File)
	if e.Offset >= 0 {
		msg += fmt.Sprintf(" at offset %d", e.Offset)
	}
	msg += ": " + e.Reason
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns store.ErrCorrupt and the underlying error.
func (e *CorruptError) Unwrap() []error {
	if e.Err == nil {
		return []error{store.ErrCorrupt}
	}
	return []error{store.ErrCorrupt, e.Err}
}

// IsCorrupt reports whether err marks corruption (errors.Is(err,
// store.ErrCorrupt)). Such a log must not be used until an operator acts.
func IsCorrupt(err error) bool { return errors.Is(err, store.ErrCorrupt) }

func corruptf(file string, off int64, err error, format string, args ...any) error {
	return &CorruptError{File: file, Offset: off, Reason: fmt.Sprintf(format, args...), Err: err}
}

// ErrSegmentSizeMismatch marks a log whose segment files are whole and
// consistent but have another size than Options.SegmentSize: the log is
// healthy, it was written with another segment size. It is not
// corruption (IsCorrupt is false): open it with the size it was written
// with. Check it with errors.Is; the error is a *SegmentSizeError.
var ErrSegmentSizeMismatch = errors.New("segment size mismatch")

// SegmentSizeError says which segment size the files on disk have.
type SegmentSizeError struct {
	Dir        string // DATA/commitlog
	Found      int64  // the size of every segment file
	Configured int64  // Options.SegmentSize
}

func (e *SegmentSizeError) Error() string {
	return fmt.Sprintf("commitlog: %v: the log was written with %s segments, not the configured %s: the log in %s is not damaged, open it with a segment size of %s (--segment-size %s)",
		ErrSegmentSizeMismatch, humanSize(e.Found, " "), humanSize(e.Configured, " "), e.Dir, humanSize(e.Found, " "), humanSize(e.Found, ""))
}

// Unwrap returns ErrSegmentSizeMismatch.
func (e *SegmentSizeError) Unwrap() error { return ErrSegmentSizeMismatch }

// humanSize renders n with the largest binary unit that divides it
// ("16 MiB" with sep " ", "16MiB" with sep ""), else in bytes.
func humanSize(n int64, sep string) string {
	for _, u := range []struct {
		name string
		mult int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n > 0 && n%u.mult == 0 {
			return fmt.Sprintf("%d%s%s", n/u.mult, sep, u.name)
		}
	}
	return fmt.Sprintf("%d%sbytes", n, sep)
}
