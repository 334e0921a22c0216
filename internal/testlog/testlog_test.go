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
	failed   bool
}

func (r *recorder) Failed() bool { return r.failed }

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

// TestOnFailure: the buffered lines are logged at cleanup only when the
// test failed, and nothing written after the cleanup is kept.
func TestOnFailure(t *testing.T) {
	for _, failed := range []bool{false, true} {
		r := &recorder{TB: t, failed: failed}
		l := hclog.New(&hclog.LoggerOptions{Name: "node", Output: OnFailure(r)})
		l.Info("one")
		l.Warn("two")
		r.runCleanups()
		l.Info("after")
		if !failed {
			if len(r.lines) != 0 {
				t.Fatalf("passing test: logged %q, want nothing", r.lines)
			}
			continue
		}
		if len(r.lines) != 1 || !strings.Contains(r.lines[0], "node: one") || !strings.Contains(r.lines[0], "node: two") || strings.Contains(r.lines[0], "after") {
			t.Fatalf("failed test: logged %q, want one and two", r.lines)
		}
	}
}
