package core

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/transport"
)

// slaveConn is the master's side of one slave connection (RocketMQ's
// HAConnection): a reader goroutine parsing the slave's reports and a writer
// goroutine shipping the commit log.
type slaveConn struct {
	m     *Master
	conn  net.Conn
	addr  string
	log   hclog.Logger
	since time.Time

	reqCh chan struct{} // closed at the first report
	done  chan struct{} // closed when the connection closes

	closeOnce sync.Once
	reason    closeReason // set once, before done is closed

	wdone chan struct{} // closed when the writer exits

	// guarded by Master.mu
	request int64 // first report; -1 before it
	ack     int64 // last report; -1 before the first
	counted bool  // ack is within the master's log and counts for group transfer
	lastAck time.Time

	ackGauge, lagGauge prometheus.Gauge // this slave's series; nil without metrics

	next       atomic.Int64 // the writer's next transfer offset
	outOfRange atomic.Bool  // the writer's offset is outside the master's log
}

// closeReason is the single log line written when a connection closes.
type closeReason struct {
	level hclog.Level
	msg   string
	kind  string // bounded metric label
	args  []any
}

// closeWith closes the connection; the first reason wins and is logged by
// Master.removeConn once both goroutines have exited.
func (c *slaveConn) closeWith(level hclog.Level, msg, kind string, args ...any) {
	c.closeOnce.Do(func() {
		c.reason = closeReason{level: level, msg: msg, kind: kind, args: args}
		close(c.done)
		c.conn.Close()
	})
}

func (c *slaveConn) writerDone() <-chan struct{} { return c.wdone }

// closeOnError closes the connection after an I/O error, choosing the log
// line: idle timeout, peer closed, or a failure.
func (c *slaveConn) closeOnError(op string, err error) {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.closeWith(hclog.Warn, "closing idle slave connection: nothing read", "idle", "idle", c.m.cfg.HousekeepingInterval)
	case errors.Is(err, io.EOF):
		c.closeWith(hclog.Info, "slave disconnected", "eof")
	default:
		c.closeWith(hclog.Warn, "slave connection failed", op+"_error", "error", err)
	}
}

// deadlineReader sets a read deadline of timeout before every read, so that
// a connection closes after timeout without reading anything
// (haHousekeepingInterval, 5.x semantics).
type deadlineReader struct {
	conn    net.Conn
	timeout time.Duration
}

func (d deadlineReader) Read(p []byte) (int, error) {
	if d.timeout > 0 {
		if err := d.conn.SetReadDeadline(time.Now().Add(d.timeout)); err != nil {
			return 0, err
		}
	}
	return d.conn.Read(p)
}

// readLoop parses the slave's 8-byte reports (RocketMQ ReadSocketService):
// per read the last complete value is the ack; the first value is also the
// request offset.
func (c *slaveConn) readLoop() {
	m := c.m
	rr := transport.NewReportReader(deadlineReader{c.conn, m.cfg.HousekeepingInterval})
	for {
		v, err := rr.Next()
		if err != nil {
			c.closeOnError("read", err)
			return
		}
		if v < 0 {
			c.closeWith(hclog.Warn, "closing slave connection: negative offset report", "malformed", "report", v)
			return
		}
		b := m.st.Bounds()
		counted := v >= b.Min && v <= b.Max
		if v > b.Max && !m.firstOrRepeatedRequest(c, v) {
			// RocketMQ 4.9.3+ (fix for #3015): an ack beyond what the master
			// has can only come from a broken or hostile peer.
			c.closeWith(hclog.Warn, "closing slave connection: ack beyond master max offset", "ack_beyond_max", "ack", v, "master_max", b.Max)
			return
		}
		if v == 0 {
			counted = false // an empty slave acknowledges nothing
		}
		m.onReport(c, v, counted)
		if c.ackGauge != nil {
			c.ackGauge.Set(float64(v))
			c.lagGauge.Set(float64(b.Max - v))
		}
	}
}

// firstOrRepeatedRequest reports whether v may exceed the master's max
// offset without closing the connection: it is the first report (the request
// offset, handled as out of range by the writer, RocketMQ #3388) or a
// repetition of an out-of-range request offset that the master has not
// shipped anything from.
func (m *Master) firstOrRepeatedRequest(c *slaveConn, v int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return c.request < 0 || (v == c.request && c.outOfRange.Load())
}

// writeLoop ships the commit log (RocketMQ WriteSocketService): nothing
// before the first report; then frames of at most TransferBatchSize from the
// start offset, each within one segment; a heartbeat [next][0] after
// HeartbeatInterval without sending. It wakes on store appends (Watch), not
// on a polling timer.
func (c *slaveConn) writeLoop() {
	m := c.m
	defer m.wg.Done()
	defer close(c.wdone)
	wake := make(chan struct{}, 1)
	cancel := m.st.Watch(wake)
	defer cancel()

	select {
	case <-c.reqCh:
	case <-c.done:
		return
	}
	m.mu.Lock()
	req := c.request
	m.mu.Unlock()
	b := m.st.Bounds()
	next := req
	if req == 0 {
		next = startOffset(b, m.cfg.StartFromFirstSegment)
	}
	c.next.Store(next)
	c.log.Info("transfer starts", "request", req, "start", next, "master_min", b.Min, "master_max", b.Max)

	fw := transport.NewFrameWriter(c.conn)
	g := newGather(m.cfg.TransferBatchSize)
	lastWrite := time.Now()
	hb := time.NewTimer(m.cfg.HeartbeatInterval)
	defer hb.Stop()
	for {
		err := g.collect(m.st, next)
		switch {
		case errors.Is(err, store.ErrOffsetOutOfRange):
			c.markOutOfRange(next)
		case err != nil:
			c.closeWith(hclog.Error, "closing slave connection: store read failed", "store_error", "offset", next, "error", err)
			return
		case g.frames > 0:
			frames, n := g.frames, g.bytes
			err := g.write(c.conn)
			if err != nil {
				c.closeOnError("write", fmt.Errorf("write %d frames at offset %d: %w", frames, next, err))
				return
			}
			if c.outOfRange.Load() {
				c.outOfRange.Store(false)
				c.log.Info("slave request offset now within the master's log; transfer resumes", "offset", next)
			}
			next += n
			c.next.Store(next)
			lastWrite = time.Now()
			if m.met != nil {
				m.met.sentBytes.Add(float64(n))
				m.met.sentFrames.Add(float64(frames))
			}
			continue
		}
		// Nothing to send: heartbeat when due, else sleep until an append,
		// the heartbeat deadline or close.
		if d := m.cfg.HeartbeatInterval - time.Since(lastWrite); d > 0 {
			hb.Reset(d)
			select {
			case <-wake:
			case <-hb.C:
			case <-c.done:
				return
			}
			continue
		}
		if err := fw.WriteFrame(next, nil); err != nil {
			c.closeOnError("write", err)
			return
		}
		lastWrite = time.Now()
		if m.met != nil {
			m.met.heartbeats.Inc()
		}
	}
}

// markOutOfRange flags a transfer offset outside the master's log: RocketMQ
// sends such a slave heartbeats only, silently (#3388); replicator keeps the
// wire behaviour but says so once per connection, in Status and metrics.
func (c *slaveConn) markOutOfRange(next int64) {
	if c.outOfRange.Swap(true) {
		return
	}
	b := c.m.st.Bounds()
	c.log.Error("slave offset outside the master's commit log: sending heartbeats only; wipe the slave's store to resync",
		"offset", next, "master_min", b.Min, "master_max", b.Max)
	if c.m.met != nil {
		c.m.met.outOfRange.Inc()
	}
}

// Gathering: when more than one frame's worth of data is available (catch-up,
// or many producers), the writer sends up to gatherFrames frames — each at
// most TransferBatchSize bytes and within one segment, exactly as if sent
// one by one — in a single vectored write, straight from the store's views.
// The bytes on the wire are the same; only the number of system calls drops.
const (
	gatherFrames = 16
	gatherBytes  = 512 << 10
)

// gather holds the frames of one vectored write.
type gather struct {
	batch  int
	hdrs   [gatherFrames][transport.HeaderSize]byte
	views  [gatherFrames]store.View
	vec    [2 * gatherFrames][]byte
	frames int
	bytes  int64
}

func newGather(batch int) *gather { return &gather{batch: batch} }

// collect reads the frames available from next on, up to the gather limits,
// without waiting. Its error is that of the first read only (a later read's
// error recurs on the next call, after the collected frames went out).
func (g *gather) collect(st store.Store, next int64) error {
	g.frames, g.bytes = 0, 0
	for g.frames < gatherFrames && g.bytes < gatherBytes {
		off := next + g.bytes
		v, err := st.Read(off, g.batch)
		if err != nil {
			if g.frames == 0 {
				return err
			}
			return nil
		}
		if len(v.Data) == 0 {
			v.Release()
			return nil
		}
		if len(v.Data) > g.batch {
			v.Data = v.Data[:g.batch]
		}
		transport.PutHeader(g.hdrs[g.frames][:], off, int32(len(v.Data)))
		g.views[g.frames] = v
		g.frames++
		g.bytes += int64(len(v.Data))
	}
	return nil
}

// write sends the collected frames in one vectored write and releases the
// views.
func (g *gather) write(w io.Writer) error {
	for i := range g.frames {
		g.vec[2*i] = g.hdrs[i][:]
		g.vec[2*i+1] = g.views[i].Data
	}
	bufs := net.Buffers(g.vec[:2*g.frames])
	_, err := bufs.WriteTo(w)
	for i := range g.frames {
		g.views[i].Release()
		g.vec[2*i+1] = nil
	}
	g.frames, g.bytes = 0, 0
	return err
}

func slicesSortSlaves(s []SlaveInfo) {
	slices.SortFunc(s, func(a, b SlaveInfo) int { return strings.Compare(a.Addr, b.Addr) })
}

// startOffset is where a slave that reports 0 starts. RocketMQ 4.x computes
// max - max % segmentSize: the start of the segment the next append goes
// to, which is max itself when the log ends exactly at a segment end (the
// slave then waits for new data). The 5.x option starts at the first
// segment the master still holds.
func startOffset(b store.Bounds, fromFirstSegment bool) int64 {
	if fromFirstSegment {
		return b.Min
	}
	if b.SegmentSize <= 0 || b.Max < b.LastSegmentStart {
		return b.LastSegmentStart
	}
	// Segments are SegmentSize long and one starts at LastSegmentStart;
	// for RocketMQ's layout (file names are multiples of the segment size)
	// this is exactly max - max % segmentSize.
	return b.Max - (b.Max-b.LastSegmentStart)%b.SegmentSize
}
