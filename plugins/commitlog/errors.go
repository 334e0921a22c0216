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
