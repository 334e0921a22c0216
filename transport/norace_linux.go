//go:build linux && !race

package transport

import "golang.org/x/sys/unix"

// raceWritten: see race_linux.go; nothing without the race detector.
func raceWritten([]unix.Iovec, int) {}

// raceRead: see race_linux.go; nothing without the race detector.
func raceRead([]unix.Iovec, int) {}
