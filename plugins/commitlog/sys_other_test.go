//go:build !unix

package commitlog

import (
	"os"
	"os/exec"
	"time"
)

// processCPU: no getrusage here; the benchmarks report 0 CPU.
func processCPU() time.Duration { return 0 }

// killSelf ends this process without deferred functions or flushes.
func killSelf() { os.Exit(137) }

// killedHard reports whether a child ended as killSelf ends it.
func killedHard(ee *exec.ExitError) bool { return ee.ExitCode() == 137 }
