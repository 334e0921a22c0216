//go:build unix

package commitlog

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// processCPU is this process's user + system time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// killSelf ends this process as a crash does (SIGKILL: no deferred
// function, no flush).
func killSelf() { syscall.Kill(os.Getpid(), syscall.SIGKILL) }

// killedHard reports whether a child ended by SIGKILL.
func killedHard(ee *exec.ExitError) bool {
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
