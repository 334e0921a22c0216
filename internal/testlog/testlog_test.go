package testlog

import (
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// recorder is a testing.TB that records Log calls and cleanups.
type recorder struct {
	testing.TB
	lines    []string
	cleanups []func()
}

func (r *recorder) Log(args ...any)  { r.lines = append(r.lines, args[0].(string)) }
func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recorder) runCleanups() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// TestWriterStopsAtCleanup: lines reach t.Log (newline trimmed) until the
// writer's cleanup has run; a line after it is dropped, not logged.
func TestWriterStopsAtCleanup(t *testing.T) {
	r := &recorder{TB: t}
	l := Logger(r, "node", hclog.Debug)
	l.Info("before", "k", 1)
	r.runCleanups()
	l.Info("after")
	if len(r.lines) != 1 || !strings.Contains(r.lines[0], "[INFO]  node: before: k=1") || strings.HasSuffix(r.lines[0], "\n") {
		t.Fatalf("logged %q, want the one line before the cleanup", r.lines)
	}
}
