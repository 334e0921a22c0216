package tcptransport

import (
	"sync"
	"time"
)

// RefusalLogInterval is how often at most the transport logs a WARN line for
// refused connections (or failed TLS handshakes) of one reason from one IP
// address; the lines in between are counted and the next line reports them
// (suppressed=N). The metrics count every refusal.
const RefusalLogInterval = 10 * time.Second

// maxLimiterKeys bounds the addresses the log limiter remembers; past it,
// every new address shares one key, so a flood from many addresses still
// logs one line per interval.
const maxLimiterKeys = 4096

// logLimiter lets one log line per key through per interval and counts the
// others. Safe for concurrent use.
type logLimiter struct {
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	keys map[string]*limiterKey
}

type limiterKey struct {
	at         time.Time // when the last line was logged
	suppressed int       // lines not logged since
}

func newLogLimiter(every time.Duration, now func() time.Time) *logLimiter {
	return &logLimiter{every: every, now: now, keys: map[string]*limiterKey{}}
}

// allow reports whether a line for key may be logged now and, if so, how
// many lines of key were suppressed since the last one.
func (l *logLimiter) allow(key string) (bool, int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	k, ok := l.keys[key]
	if !ok {
		if len(l.keys) >= maxLimiterKeys {
			for name, o := range l.keys {
				if now.Sub(o.at) >= l.every && o.suppressed == 0 {
					delete(l.keys, name)
				}
			}
		}
		if len(l.keys) >= maxLimiterKeys {
			key = "\x00overflow"
			k = l.keys[key]
		}
		if k == nil {
			l.keys[key] = &limiterKey{at: now}
			return true, 0
		}
	}
	if now.Sub(k.at) < l.every {
		k.suppressed++
		return false, 0
	}
	n := k.suppressed
	k.at, k.suppressed = now, 0
	return true, n
}
