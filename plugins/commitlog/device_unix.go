//go:build unix

package commitlog

import (
	"io/fs"
	"syscall"
)

// device returns the device number of the file system fi is on, and
// false when the FileInfo does not say (not a *syscall.Stat_t).
func device(fi fs.FileInfo) (uint64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Dev), true // Dev is int32 on some platforms
}
