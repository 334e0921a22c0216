package testlog

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// writer passes each write to t.Log, or keeps it in buf (OnFailure),
// until the test's cleanup closes it.
type writer struct {
	mu     sync.Mutex
	t      testing.TB
	buf    *bytes.Buffer // nil: straight to t.Log
	closed bool
}

// Writer returns an io.Writer onto t.Log, one call per write (trailing
// newlines trimmed). It stops at the test's cleanup: register cleanups
// that log (closing a node, say) after calling Writer, as they then run
// before it.
func Writer(t testing.TB) io.Writer { return newWriter(t, nil) }

// OnFailure returns an io.Writer that keeps what is written and logs it
// through t.Log at the test's cleanup, only if the test failed: the
// logs of busy components (nodes, connections) that would drown a
// passing test's output but explain a failing one. Writes after that
// cleanup are dropped, as with Writer.
func OnFailure(t testing.TB) io.Writer { return newWriter(t, new(bytes.Buffer)) }

func newWriter(t testing.TB, buf *bytes.Buffer) *writer {
	w := &writer{t: t, buf: buf}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.closed = true
		if w.buf != nil && w.buf.Len() > 0 && t.Failed() {
			t.Log("logs up to the failure:\n" + strings.TrimRight(w.buf.String(), "\n"))
		}
		w.buf = nil
	})
	return w
}

func (w *writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
	case w.buf != nil:
		w.buf.Write(p)
	default:
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// Logger is an hclog.Logger named name at level that writes to Writer(t).
func Logger(t testing.TB, name string, level hclog.Level) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: level, Output: Writer(t)})
}
