package metadata

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/internal/testlog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a Clock whose time moves only when the test says, and whose
// tickers fire only on Tick.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	tickers []*fakeTicker
	created chan struct{} // one value per NewTicker
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC), created: make(chan struct{}, 16)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) NewTicker(time.Duration) Ticker {
	t := &fakeTicker{c: make(chan time.Time, 1)}
	c.mu.Lock()
	c.tickers = append(c.tickers, t)
	c.mu.Unlock()
	c.created <- struct{}{}
	return t
}

// Tick fires every live ticker once (coalescing like time.Ticker).
func (c *fakeClock) Tick() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.tickers {
		if !t.stopped() {
			select {
			case t.c <- c.now:
			default:
			}
		}
	}
}

type fakeTicker struct {
	c    chan time.Time
	mu   sync.Mutex
	stop bool
}

func (t *fakeTicker) C() <-chan time.Time { return t.c }
func (t *fakeTicker) Stop()               { t.mu.Lock(); t.stop = true; t.mu.Unlock() }
func (t *fakeTicker) stopped() bool       { t.mu.Lock(); defer t.mu.Unlock(); return t.stop }

// logBuffer collects JSON log lines, safe for concurrent writers.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// count returns how many lines have the level and contain msg.
func (b *logBuffer) count(level, msg string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, l := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(l, `"@level":"`+level+`"`) && strings.Contains(l, msg) {
			n++
		}
	}
	return n
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newTestLogger(t *testing.T, buf *logBuffer) hclog.Logger {
	t.Helper()
	opts := &hclog.LoggerOptions{Name: t.Name(), Level: hclog.Trace}
	if buf != nil {
		opts.Output = buf
		opts.JSONFormat = true
	} else {
		opts.Output = testlog.Writer(t)
	}
	return hclog.New(opts)
}

// dirSnapshot maps every file name in dir to its content.
func dirSnapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(data)
	}
	return out
}

func sameSnapshot(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func names(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
