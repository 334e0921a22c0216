//go:build !linux

package commitlog

import "errors"

// Without Linux's madvise advice the mapping is used as it is: populating
// ahead reports unsupported (callers fall back to touching pages, or stop
// prefaulting), reads fault pages in one by one, and released ranges stay
// mapped (counted in the resident set until the segment is unmapped).

var errNoPopulate = errors.New("commitlog: MADV_POPULATE_WRITE is Linux only")

func populateWrite([]byte) error { return errNoPopulate }

func populateRead([]byte) {}

func dontNeed([]byte) error { return nil }
