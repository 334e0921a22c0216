package core

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"runtime"
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

	hsCh chan struct{} // autoswitch: closed when the slave's handshake was read

	// guarded by Master.mu
	hsRead       bool  // autoswitch: the slave's handshake was read
	brokerID     int64 // autoswitch: from the handshake; -1 before it
	learner      bool  // autoswitch: async learner, never in the SyncStateSet
	syncFromLast bool  // autoswitch: an ack of 0 starts at the last segment
	caughtUp     time.Time
	request      int64 // first report; -1 before it
	ack          int64 // last report; -1 before the first
	counted      bool  // ack is within the master's log and counts for group transfer
	lastAck      time.Time

	ackGauge, lagGauge prometheus.Gauge // this slave's series; nil without metrics

	next       atomic.Int64 // the writer's next transfer offset
	outOfRange atomic.Bool  // the writer's offset is outside the master's log

	// autoswitch caught-up tracking (RocketMQ's lastMasterMaxOffset and
	// lastTransferTimeMs, kept for recent transfers), written by the writer
	xfers transfers
}

// ackCounts reports whether the connection's acks may count for group
// transfer: always in classic; in autoswitch only after the handshake and
// never for an async learner. The caller holds Master.mu.
func (c *slaveConn) ackCounts() bool {
	if c.m.byID == nil {
		return true
	}
	return c.hsRead && !c.learner
}

// haState is the autoswitch connection state shown in Status. The caller
// holds Master.mu.
func (c *slaveConn) haState() transport.HAState {
	if c.request >= 0 {
		return transport.StateTransfer
	}
	return transport.StateHandshake
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
	case errors.Is(err, transport.ErrNegativeOffset):
		c.closeWith(hclog.Warn, "closing slave connection: malformed report", "malformed", "error", err)
	default:
		c.closeWith(hclog.Warn, "slave connection failed", op+"_error", "error", err)
	}
}

// readLoop parses the slave's 8-byte reports (RocketMQ ReadSocketService):
// per read the last complete value is the ack; the first value is also the
// request offset. A transport.ConnReader reads them (a read deadline of
// HousekeepingInterval before every read that may wait: a connection that
// reads nothing for that long closes, haHousekeepingInterval's 5.x semantics):
// on a TCP connection on Linux as raw system calls through the poller.
// Through the ordinary system-call entry, each report read after the
// process had gone idle woke the runtime's monitor thread into polling
// every 20 µs for a millisecond or more; with reports 1 MiB apart in a
// catch-up it never went back to sleep (docs/benchmarks.md).
func (c *slaveConn) readLoop() {
	if c.m.byID != nil {
		c.asReadLoop()
		return
	}
	rr := transport.NewReportReader(transport.NewConnReader(c.conn, c.m.cfg.HousekeepingInterval))
	for {
		v, err := rr.Next()
		if err != nil {
			c.closeOnError("read", err)
			return
		}
		if !c.ack1(v) {
			return
		}
	}
}

// ack1 applies one report or ack v of either protocol. It returns false
// when it closed the connection.
func (c *slaveConn) ack1(v int64) bool {
	m := c.m
	if v < 0 {
		c.closeWith(hclog.Warn, "closing slave connection: negative offset report", "malformed", "report", v)
		return false
	}
	b := m.st.Bounds()
	counted := v >= b.Min && v <= b.Max
	if v > b.Max && !m.firstOrRepeatedRequest(c, v) {
		// RocketMQ 4.9.3+ (fix for #3015): an ack beyond what the master
		// has can only come from a broken or hostile peer.
		c.closeWith(hclog.Warn, "closing slave connection: ack beyond master max offset", "ack_beyond_max", "ack", v, "master_max", b.Max)
		return false
	}
	if v == 0 {
		counted = false // an empty slave acknowledges nothing
	}
	m.onReport(c, v, counted)
	if c.ackGauge != nil {
		c.ackGauge.Set(float64(v))
		c.lagGauge.Set(float64(max(b.Max-v, 0)))
	}
	return true
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
// on a polling timer. In autoswitch it first answers the slave's handshake
// and bounds every frame by the current epoch's end as well
// (AutoSwitchHAConnection's WriteSocketService).
func (c *slaveConn) writeLoop() {
	m := c.m
	defer m.wg.Done()
	defer close(c.wdone)
	wake := make(chan struct{}, 1)
	cancel := m.st.Watch(wake)
	defer cancel()

	as := m.byID != nil
	if as {
		select {
		case <-c.hsCh:
		case <-c.done:
			return
		}
		if !c.sendHandshake() {
			return
		}
	}
	select {
	case <-c.reqCh:
	case <-c.done:
		return
	}
	m.mu.Lock()
	req, fromLast := c.request, c.syncFromLast
	m.mu.Unlock()
	b := m.st.Bounds()
	next := req
	switch {
	case req != 0:
	case as && fromLast:
		next = startOffset(b, false)
	case as:
		next = b.Min // RocketMQ 5: an empty slave gets the full history
	default:
		next = startOffset(b, m.cfg.StartFromFirstSegment)
	}
	c.next.Store(next)
	c.log.Info("transfer starts", "request", req, "start", next, "master_min", b.Min, "master_max", b.Max)

	g := newGather(m.cfg.TransferBatchSize, as)
	lastWrite := time.Now()
	every := m.heartbeatEvery()
	hb := time.NewTimer(every)
	defer hb.Stop()
	for {
		err := c.collect(g, next)
		switch {
		case errors.Is(err, store.ErrOffsetOutOfRange):
			c.markOutOfRange(next)
		case errors.Is(err, errNoEpoch):
			b := m.st.Bounds()
			c.closeWith(hclog.Error, "closing slave connection: no epoch entry covers the data to send (never a stale transfer header, RocketMQ #9689)",
				"epoch_missing", "offset", next, "master_max", b.Max, "epochs", m.epochs.Len())
			return
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
			if as {
				c.xfers.add(g.max, lastWrite)
			}
			if m.met != nil {
				m.met.sentBytes.Add(float64(n))
				m.met.sentFrames.Add(float64(frames))
			}
			continue
		}
		// Nothing to send: heartbeat when due, else sleep until an append,
		// the heartbeat deadline or close.
		if d := every - time.Since(lastWrite); d > 0 {
			hb.Reset(d)
			select {
			case <-wake:
				// An append woke the writer. When other puts run too,
				// their appends are usually runnable right behind this
				// one (a producer stream starts a batch's puts
				// together): yield once so that they land and leave in
				// this frame, instead of a frame (and a slave read and
				// ack) per put. A lone put is sent at once.
				if m.puts.Load() > 1 {
					runtime.Gosched()
				}
			case <-hb.C:
			case <-c.done:
				return
			}
			continue
		}
		if err := g.heartbeat(c.conn, next, m, !c.outOfRange.Load()); err != nil {
			c.closeOnError("write", err)
			return
		}
		lastWrite = time.Now()
		if m.met != nil {
			m.met.heartbeats.Inc()
		}
	}
}

// heartbeatEvery is the writer's idle heartbeat interval: HeartbeatInterval;
// in autoswitch at most a third of MaxTimeSlaveNotCatchup (not below
// minHeartbeat), because a slave acks every heartbeat and its acks alone
// keep it in the in-sync set: an idle, healthy member acks often enough
// even when MaxTimeSlaveNotCatchup is below the slave's ReportInterval.
func (m *Master) heartbeatEvery() time.Duration {
	if m.byID == nil {
		return m.cfg.HeartbeatInterval
	}
	return min(m.cfg.HeartbeatInterval, max(m.cfg.MaxTimeSlaveNotCatchup/3, minHeartbeat))
}

const minHeartbeat = 10 * time.Millisecond

// errNoEpoch: no epoch entry covers an offset the writer has data for.
var errNoEpoch = errors.New("no epoch entry covers the offset")

// collect gathers the frames available from next. In autoswitch the frames
// end at the current epoch's end and carry its header fields; the epoch is
// looked up after the max offset is read, so that bytes below that max
// belong to the entry found (a later epoch starts at or above it).
func (c *slaveConn) collect(g *gather, next int64) error {
	m := c.m
	if !g.as {
		return g.collect(m.st, next, math.MaxInt64)
	}
	b := m.st.Bounds()
	if next < b.Min || next > b.Max {
		return fmt.Errorf("offset %d outside [%d, %d]: %w", next, b.Min, b.Max, store.ErrOffsetOutOfRange)
	}
	g.max = b.Max
	if next == b.Max {
		g.frames, g.bytes = 0, 0
		return nil
	}
	e, ok := m.epochs.FindByOffset(next)
	if !ok {
		return errNoEpoch
	}
	g.th = transport.TransferHeader{Epoch: e.Epoch, EpochStartOffset: e.StartOffset, ConfirmOffset: m.reportedConfirm(b.Max)}
	return g.collect(m.st, next, min(e.EndOffset, b.Max))
}

// markOutOfRange flags a transfer offset outside the master's log: RocketMQ
// sends such a slave heartbeats only, silently (#3388); replicator keeps the
// wire behaviour but says so once per connection, in Status and metrics.
func (c *slaveConn) markOutOfRange(next int64) {
	if c.outOfRange.Swap(true) {
		return
	}
	b := c.m.st.Bounds()
	args := []any{"offset", next, "master_min", b.Min, "master_max", b.Max}
	if next > b.Max {
		args = append(args, "hint", "the slave's log is longer than the master's: it diverged (use --ha-protocol autoswitch to truncate it)")
	}
	if c.m.logOutOfRangeOnce(c.addr) {
		c.log.Error("slave offset outside the master's commit log: sending heartbeats only; wipe the slave's store to resync", args...)
	} else {
		c.log.Debug("slave offset out of the master log range again (ERROR rate-limited per source): heartbeats only", args...)
	}
	if c.m.met != nil {
		c.m.met.outOfRange.Inc()
	}
}

// outOfRangeLogEvery rate-limits the out-of-range ERROR per source host: a
// slave reconnecting every 5 s would otherwise log it on every connection.
const outOfRangeLogEvery = 10 * time.Minute

// logOutOfRangeOnce reports whether the out-of-range ERROR for the slave at
// addr is due.
func (m *Master) logOutOfRangeOnce(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.oorLog == nil {
		m.oorLog = make(map[string]time.Time)
	}
	if t, ok := m.oorLog[host]; ok && now.Sub(t) < outOfRangeLogEvery {
		return false
	}
	for h, t := range m.oorLog { // bounded: forget old sources
		if now.Sub(t) >= outOfRangeLogEvery {
			delete(m.oorLog, h)
		}
	}
	m.oorLog[host] = now
	return true
}

// Gathering: when more than one frame's worth of data is available (catch-up,
// or many producers), the writer sends up to transport.MaxBatchFrames
// frames — each at most TransferBatchSize bytes and within one segment,
// exactly as if sent one by one — in a single vectored write
// (transport.FrameBatch), straight from the store's views. The bytes on
// the wire are the same; only the number of system calls drops.
const gatherBytes = 512 << 10

// gather holds the store views behind one transport.FrameBatch: the views
// stay pinned until the batch is written.
type gather struct {
	batch  int
	as     bool                     // autoswitch: transfer headers
	th     transport.TransferHeader // autoswitch: epoch fields of the frames collected
	max    int64                    // autoswitch: the master's max offset when collected
	fb     *transport.FrameBatch
	views  [transport.MaxBatchFrames]store.View
	frames int
	bytes  int64
}

func newGather(batch int, autoswitch bool) *gather {
	return &gather{batch: batch, as: autoswitch, fb: transport.NewFrameBatch(autoswitch)}
}

// collect reads the frames available from next on, below end, up to the
// gather limits, without waiting. Its error is that of the first read only
// (a later read's error recurs on the next call, after the collected frames
// went out).
func (g *gather) collect(st store.Log, next, end int64) error {
	g.frames, g.bytes = 0, 0
	for g.frames < transport.MaxBatchFrames && g.bytes < gatherBytes {
		off := next + g.bytes
		if off >= end {
			return nil
		}
		v, err := st.Read(off, int(min(int64(g.batch), end-off)))
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
		h := g.th
		h.Offset = off
		if err := g.fb.Add(h, v.Data); err != nil {
			v.Release()
			if g.frames == 0 {
				return err
			}
			return nil
		}
		g.views[g.frames] = v
		g.frames++
		g.bytes += int64(len(v.Data))
	}
	return nil
}

// write sends the collected frames in one vectored write and releases the
// views.
func (g *gather) write(w io.Writer) error {
	_, err := g.fb.WriteTo(w)
	for i := range g.frames {
		g.views[i].Release()
	}
	g.frames, g.bytes = 0, 0
	return err
}

// heartbeat writes an empty frame at next: [next][0] (classic), or a
// transfer header of size 0 with the epoch that covers next (the last epoch
// when none does) and the confirm offset (autoswitch). For a slave within
// the master's log the confirm offset is capped at next: bytes appended
// since the writer found nothing to send are not yet on their way, and a
// confirm offset beyond a heartbeat's offset tells the slave that it is
// out of range.
func (g *gather) heartbeat(w io.Writer, next int64, m *Master, inRange bool) error {
	h := transport.TransferHeader{Offset: next}
	if g.as {
		e, ok := m.epochs.FindByOffset(next)
		if !ok {
			e, _ = m.epochs.Last()
		}
		conf := m.reportedConfirm(m.st.Bounds().Max)
		if inRange {
			conf = min(conf, next)
		}
		h.Epoch, h.EpochStartOffset, h.ConfirmOffset = e.Epoch, e.StartOffset, conf
	}
	if err := g.fb.Add(h, nil); err != nil {
		return err
	}
	_, err := g.fb.WriteTo(w)
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
	// For RocketMQ's layout (file names are multiples of the segment
	// size) this is exactly max - max % segmentSize.
	return b.SegmentStart(b.Max)
}
