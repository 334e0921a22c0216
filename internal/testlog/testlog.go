package testlog

import (
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// writer passes each write to t.Log until closed.
type writer struct {
	mu     sync.Mutex
	t      testing.TB
	closed bool
}

// Writer returns an io.Writer onto t.Log, one call per write (trailing
// newlines trimmed). It stops at the test's cleanup: register cleanups
// that log (closing a node, say) after calling Writer, as they then run
// before it.
func Writer(t testing.TB) io.Writer {
	w := &writer{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
	})
	return w
}

func (w *writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// Logger is an hclog.Logger named name at level that writes to Writer(t).
func Logger(t testing.TB, name string, level hclog.Level) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: level, Output: Writer(t)})
}
