package commitlog

import "golang.org/x/sys/unix"

// The segment mapping's advice (madvise(2)); Linux only, see
// madvise_other.go for the portable path.

// populateWrite maps the pages of b writable without changing them
// (MADV_POPULATE_WRITE; an error on Linux < 5.14).
func populateWrite(b []byte) error { return unix.Madvise(b, unix.MADV_POPULATE_WRITE) }

// populateRead maps the pages of b, already in the page cache, with one
// call (MADV_POPULATE_READ); failure only means reads fault as usual.
func populateRead(b []byte) { _ = unix.Madvise(b, unix.MADV_POPULATE_READ) }

// dontNeed drops the page-table entries of b (MADV_DONTNEED on a shared
// file mapping: the page cache keeps the pages).
func dontNeed(b []byte) error { return unix.Madvise(b, unix.MADV_DONTNEED) }
