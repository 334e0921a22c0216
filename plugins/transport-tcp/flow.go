package tcptransport

import (
	"net"
	"sync"
	"time"
)

// flowChunk is the most a throttled connection writes at once, so that a
// large frame batch is spread over the second instead of sent in one burst.
const flowChunk = 64 << 10

// flowBucket is a token bucket of bytes (RocketMQ FlowMonitor: at most
// maxHaTransferByteInSecond per second per HA connection). Safe for
// concurrent use.
type flowBucket struct {
	rate  float64 // bytes per second
	burst float64
	now   func() time.Time
	sleep func(time.Duration)

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func newFlowBucket(rate int64, now func() time.Time, sleep func(time.Duration)) *flowBucket {
	burst := max(float64(flowChunk), float64(rate)/10)
	return &flowBucket{rate: float64(rate), burst: burst, now: now, sleep: sleep, tokens: burst, last: now()}
}

// take waits until n bytes (n <= burst) may be sent, and takes them.
func (f *flowBucket) take(n int) {
	for {
		f.mu.Lock()
		now := f.now()
		f.tokens = min(f.burst, f.tokens+now.Sub(f.last).Seconds()*f.rate)
		f.last = now
		if f.tokens >= float64(n) {
			f.tokens -= float64(n)
			f.mu.Unlock()
			return
		}
		wait := time.Duration((float64(n) - f.tokens) / f.rate * float64(time.Second))
		f.mu.Unlock()
		f.sleep(max(wait, time.Millisecond))
	}
}

// throttledConn is an accepted HA connection whose writes (the master's
// frames to a slave) go at most Options.MaxTransferRate bytes per second.
// It is a plain net.Conn: writes are never vectored past the throttle.
type throttledConn struct {
	net.Conn
	flow *flowBucket
}

func (c *throttledConn) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		chunk := b[:min(len(b), flowChunk)]
		c.flow.take(len(chunk))
		w, err := c.Conn.Write(chunk)
		n += w
		if err != nil {
			return n, err
		}
		b = b[len(chunk):]
	}
	return n, nil
}

// NetConn returns the wrapped connection.
func (c *throttledConn) NetConn() net.Conn { return c.Conn }
