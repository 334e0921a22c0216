//go:build !linux

package benchload

import "os"

// preallocate gives f its full size.
func preallocate(f *os.File, n int64) error { return f.Truncate(n) }
