//go:build linux && race

package vfs

import (
	"runtime"
	"unsafe"
)

// raceRead tells the race detector that a raw system call read b (as
// os.File.WriteAt's system call does for its own).
func raceRead(b []byte) {
	if len(b) > 0 {
		runtime.RaceReadRange(unsafe.Pointer(&b[0]), len(b))
	}
}
