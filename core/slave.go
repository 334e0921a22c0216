package core

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/replicatorhq/replicator/core/epoch"
	"github.com/replicatorhq/replicator/internal/backoff"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/transport"
)

// SlaveNode follows a master and appends what it ships (RocketMQ's
// HAClient, with 5.x housekeeping semantics and an immediate first report;
// with ProtocolAutoSwitch, AutoSwitchHAClient: handshake, truncation to the
// consistent point, epochs).
//
// It is safe for concurrent use.
type SlaveNode struct {
	st  store.Log
	tr  transport.Transport
	cfg SlaveConfig
	log hclog.Logger
	met *slaveMetrics

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex // guards everything below
	started   bool
	closed    bool
	conn      net.Conn // the current connection, closed by Close
	status    SlaveStatus
	segLog    string // SegmentError already logged
	unhealthy string // Unhealthy already logged
	hooks     []func()
	resets    int   // consecutive sessions reset by the peer right after connecting
	bndAt     int64 // endsAtBoundary's cached answer for this max offset
	bndKnown  bool
	bndOK     bool

	// boundary: the local max offset is a record boundary (a log handed to
	// NewSlave: recovered from disk or written as a master). Cleared once
	// a session appended bytes (frames split records).
	boundary atomic.Bool

	// up: a connection of this client reached TRANSFER; from then on a
	// retry waits ReconnectDelay. retry: the delay planned after the
	// current session if it fails before that (see run).
	up    atomic.Bool
	retry atomic.Int64 // time.Duration
	// rearm carries Rearm to run: the quick schedule again, now.
	rearm chan struct{}

	lastFrame atomic.Int64 // Unix nanoseconds of the last frame read; 0 = none
	ackSent   atomic.Int64 // last offset reported; -1 before any
	segErr    atomic.Bool  // status.SegmentError is set
	confirm   atomic.Int64 // autoswitch: min(master's confirm offset, local max)
}

// NewSlave returns a slave HA client over st. Start begins replicating.
func NewSlave(st store.Log, tr transport.Transport, cfg SlaveConfig) (*SlaveNode, error) {
	cfg, log, met, err := prepare(st != nil && tr != nil, cfg, "slave", cfg.Logger, cfg.Registerer, newSlaveMetrics)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &SlaveNode{
		st:     st,
		tr:     tr,
		cfg:    cfg,
		log:    log.With("master", cfg.MasterAddr),
		met:    met,
		ctx:    ctx,
		cancel: cancel,
		rearm:  make(chan struct{}, 1),
		status: SlaveStatus{MasterAddr: cfg.MasterAddr, Protocol: cfg.Protocol, HAState: transport.StateReady.String()},
	}
	s.ackSent.Store(-1)
	s.boundary.Store(st.Bounds().Max > 0)
	return s, nil
}

// Start launches the HA client loop.
func (s *SlaveNode) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := startable(s.closed, s.started); err != nil {
		return err
	}
	s.started = true
	s.wg.Add(1)
	go s.run()
	return nil
}

// OnConnect registers f, called on the client's goroutine (keep it short)
// each time a connection reaches TRANSFER: classic, once the first report
// is sent; autoswitch, once the handshake and truncation are done and the
// first ack is sent.
func (s *SlaveNode) OnConnect(f func()) {
	s.mu.Lock()
	s.hooks = append(s.hooks, f)
	s.mu.Unlock()
}

// Status reports the HA client.
func (s *SlaveNode) Status() SlaveStatus {
	maxOff := s.st.Bounds().Max
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.MaxOffset = maxOff
	st.AckSent = s.ackSent.Load()
	st.ConfirmOffset = s.confirmOffset(maxOff)
	if ns := s.lastFrame.Load(); ns != 0 {
		st.LastFrameTime = time.Unix(0, ns)
	}
	return st
}

// ConfirmOffset is min(the master's confirm offset, the local max offset)
// in autoswitch, the local max offset in classic.
func (s *SlaveNode) ConfirmOffset() int64 { return s.confirmOffset(s.st.Bounds().Max) }

func (s *SlaveNode) confirmOffset(maxOff int64) int64 {
	if s.cfg.Protocol != ProtocolAutoSwitch {
		return maxOff
	}
	return min(s.confirm.Load(), maxOff)
}

// Put always fails with ErrSlaveWriteProtected (slave write protection).
func (s *SlaveNode) Put(ctx context.Context, msg *record.Message) (PutResult, error) {
	return PutResult{}, ErrSlaveWriteProtected
}

// Close stops the client and waits for its goroutines. Idempotent. It does
// not close the store.
func (s *SlaveNode) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		s.cancel()
		if s.conn != nil {
			s.conn.Close()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// errStopped marks a session end after which the client must stop: the
// store failed (any error other than the store's sentinels means the store
// is unusable).
var errStopped = errors.New("replicator: slave replication stopped")

// loggedError marks a session end whose reason is already logged, so that
// a dropped connection costs one log line.
type loggedError struct{ error }

func (e loggedError) Unwrap() error { return e.error }

// Until a connection of a client reaches TRANSFER (after Start, so after
// every role change: Replica.BecomeSlave starts a new client) it retries
// quickly: the accept loops' backoff (internal/backoff) times
// firstRetryScale, 50 ms doubling up to ReconnectDelay. A master named by
// an election opens its HA listener a moment after the group names it,
// so the first dial of its slaves is often refused, and a 5 s wait would
// leave the group with one replica that long after every failover. Once
// a connection was up, a retry waits ReconnectDelay, RocketMQ's
// steady-state behaviour (a master that drops its slaves is not hammered).
const firstRetryScale = 10

// retryIn is the wait before the next connection attempt should the
// current one fail now.
func (s *SlaveNode) retryIn() time.Duration {
	if s.up.Load() {
		return s.cfg.ReconnectDelay
	}
	return time.Duration(s.retry.Load())
}

// run is the client loop: connect, replicate until the connection drops,
// wait (retryIn), again.
func (s *SlaveNode) run() {
	defer s.wg.Done()
	var bo backoff.Backoff
	for attempt := 0; ; attempt++ {
		s.retry.Store(int64(min(firstRetryScale*bo.Next(), s.cfg.ReconnectDelay)))
		if attempt > 0 {
			s.mu.Lock()
			s.status.Reconnects++
			s.mu.Unlock()
			if s.met != nil {
				s.met.reconnects.Inc()
			}
		}
		err := s.session()
		if s.ctx.Err() != nil {
			return
		}
		if errors.Is(err, errStopped) {
			s.log.Error("replication stopped: the store failed", "error", err)
			return
		}
		if !s.sleep(s.retryIn(), &bo) {
			return
		}
	}
}

// sleep waits d before the next attempt; a Rearm ends the wait at once
// and restarts the quick schedule (bo). It reports false when the client
// is closing.
func (s *SlaveNode) sleep(d time.Duration, bo *backoff.Backoff) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.rearm:
		*bo = backoff.Backoff{}
		return true
	case <-s.ctx.Done():
		return false
	}
}

// Rearm tells a client that is not connected that its master was named
// again at the same address (a role change that names the address it
// already dials: the same node elected again, or another behind the same
// address): a wait in progress ends now, and until a connection reaches
// TRANSFER the client retries on the quick schedule, as after Start. A
// connected client is left alone.
func (s *SlaveNode) Rearm() {
	if s.Status().Connected {
		return
	}
	s.up.Store(false)
	select {
	case s.rearm <- struct{}{}:
	default:
	}
}

func (s *SlaveNode) setError(err error) {
	s.mu.Lock()
	s.status.LastError = err.Error()
	s.mu.Unlock()
}

func (s *SlaveNode) setState(st transport.HAState) {
	s.mu.Lock()
	s.status.HAState = st.String()
	s.mu.Unlock()
}

// setUnhealthy records why the slave refuses to replicate; the first
// occurrence of a reason is logged at ERROR (one line per state change).
func (s *SlaveNode) setUnhealthy(reason string, args ...any) {
	s.mu.Lock()
	first := s.unhealthy != reason
	s.unhealthy = reason
	s.status.Unhealthy = reason
	s.mu.Unlock()
	if first {
		s.log.Error(reason, append(args, "retry_in", s.retryIn())...)
	}
}

// clearUnhealthy marks the slave healthy again (logged once).
func (s *SlaveNode) clearUnhealthy() {
	s.mu.Lock()
	was := s.unhealthy
	s.unhealthy = ""
	s.status.Unhealthy = ""
	s.mu.Unlock()
	if was != "" {
		s.log.Info("replication healthy again", "was", was)
	}
}

// session runs one connection to the master. It returns why it ended.
func (s *SlaveNode) session() error {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ConnectTimeout)
	conn, err := s.tr.Dial(ctx, s.cfg.MasterAddr)
	cancel()
	if err != nil {
		if s.ctx.Err() == nil {
			s.log.Warn("connect to master failed", "error", err, "retry_in", s.retryIn())
			s.setError(fmt.Errorf("connect: %w", err))
		}
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		conn.Close()
		return ErrClosed
	}
	s.conn = conn
	s.mu.Unlock()

	ss := &slaveSession{s: s, conn: conn, done: make(chan struct{}), start: time.Now(),
		cr: transport.NewConnReader(conn, s.cfg.HousekeepingInterval)}
	if s.cfg.Protocol == ProtocolAutoSwitch {
		ss.rw = transport.NewAckWriter(conn)
	} else {
		ss.rw = transport.NewReportWriter(conn)
	}
	// The socket is read on a goroutine of its own, ahead of the receive
	// loop, so that the next frames arrive while the loop writes this one
	// to the store (docs/benchmarks.md, catch-up).
	ss.cr.StartReadAhead()
	maxOff := s.st.Bounds().Max
	ss.max.Store(maxOff)
	s.log.Info("connected to master", "local_addr", conn.LocalAddr().String(), "max_offset", maxOff, "protocol", s.cfg.Protocol.String())
	s.mu.Lock()
	s.status.Connected = true
	s.status.LastError = ""
	s.mu.Unlock()
	if s.met != nil {
		s.met.connected.Set(1)
	}

	err = ss.run()

	conn.Close()
	ss.cr.StopReadAhead()
	s.mu.Lock()
	s.conn = nil
	s.status.Connected = false
	s.status.HAState = transport.StateReady.String()
	if err != nil && s.ctx.Err() == nil {
		s.status.LastError = err.Error()
	}
	s.mu.Unlock()
	if s.met != nil {
		s.met.connected.Set(0)
	}
	if ss.appended {
		s.boundary.Store(false)
	}
	var le loggedError
	if s.ctx.Err() == nil && !errors.As(err, &le) && !errors.Is(err, errStopped) {
		args := []any{"reason", err, "retry_in", s.retryIn()}
		if n := s.resetCount(ss, err); n > 0 {
			args = append(args, "resets_after_connect", n, "hint",
				"the master resets this connection right after it opens: it may refuse this address (check its --ha-allow list)")
		}
		s.log.Info("disconnected from master", args...)
	}
	return err
}

// resetCount counts consecutive sessions that the peer reset (or closed)
// before sending a single frame; 0 when this one received frames.
func (s *SlaveNode) resetCount(ss *slaveSession, err error) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss.frames > 0 || !(isReset(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
		s.resets = 0
		return 0
	}
	s.resets++
	return s.resets
}

// slaveSession is one connection: a reader goroutine (the caller of run)
// applying frames, and a reporter goroutine sending the max offset at least
// every ReportInterval.
type slaveSession struct {
	s    *SlaveNode
	conn net.Conn
	cr   *transport.ConnReader
	max  atomic.Int64 // the local max offset

	// Reports are written by whichever goroutine holds wmu; the other one
	// never waits for it: it sets pending (and force) and returns, and the
	// holder writes the latest max offset before it lets go. So neither the
	// frame reader nor the reporter ever blocks behind the other's write.
	wmu      sync.Mutex              // guards rw and lastSent
	rw       *transport.ReportWriter // reports, or acks [2][offset] (autoswitch)
	lastSent int64
	pending  atomic.Bool
	force    atomic.Bool
	start    time.Time    // session start, the base of lastTime
	lastTime atomic.Int64 // time of the last report, as a duration since start

	done chan struct{} // closed when the reader ends

	// receive loop state (reader goroutine only)
	frame     rxFrame // the frame being received (receive)
	frames    int64   // frames received
	appended  bool    // bytes were appended
	lastEpoch int32   // autoswitch: the local last epoch
	hasEpoch  bool
	hbOnly    bool // autoswitch: the master sends heartbeats only while it holds more
}

// report sends the current max offset, unless it equals the last report
// and no forced report is pending. If another goroutine is writing a report
// it leaves the work to it and returns nil at once.
func (ss *slaveSession) report(force bool) error {
	if force {
		ss.force.Store(true)
	}
	ss.pending.Store(true)
	for ss.pending.Load() {
		if !ss.wmu.TryLock() {
			return nil // the holder sees pending and reports the latest max
		}
		ss.pending.Store(false)
		f := ss.force.Swap(false)
		v := ss.max.Load()
		var err error
		if f || v != ss.lastSent {
			if err = ss.rw.WriteReport(v); err == nil {
				ss.lastSent = v
				ss.lastTime.Store(int64(time.Since(ss.start)))
				ss.s.ackSent.Store(v)
				if ss.s.met != nil {
					ss.s.met.reports.Inc()
				}
			}
		}
		ss.wmu.Unlock()
		if err != nil {
			return fmt.Errorf("report offset %d: %w", v, err)
		}
	}
	return nil
}

func (ss *slaveSession) run() error {
	s := ss.s
	rx := ss.newReceiver()
	if s.cfg.Protocol == ProtocolAutoSwitch {
		if err := ss.handshake(rx); err != nil {
			return err
		}
	}
	// The first report goes out at once (RocketMQ 4.x waits 5 s, 5.x sends
	// a fresh or truncated slave's first ack with the 5 s heartbeat): it
	// is the request offset.
	if err := ss.report(true); err != nil {
		return err
	}
	s.setState(transport.StateTransfer)
	s.up.Store(true)
	select {
	case <-s.rearm: // up again: a Rearm before this connection is spent
	default:
	}
	s.mu.Lock()
	hooks := s.hooks
	s.mu.Unlock()
	for _, f := range hooks {
		f()
	}
	var rwg sync.WaitGroup
	rwg.Add(1)
	go func() {
		defer rwg.Done()
		ss.reportLoop()
	}()
	err := ss.receive(rx)
	close(ss.done)
	ss.conn.Close() // unblocks a report write
	rwg.Wait()
	return err
}

// reportLoop sends the current max offset whenever ReportInterval passed
// since the last report (RocketMQ's heartbeat report).
func (ss *slaveSession) reportLoop() {
	iv := ss.s.cfg.ReportInterval
	t := time.NewTimer(iv)
	defer t.Stop()
	for {
		select {
		case <-ss.done:
			return
		case <-t.C:
		}
		due := iv - (time.Since(ss.start) - time.Duration(ss.lastTime.Load()))
		if due > 0 {
			t.Reset(due)
			continue
		}
		if err := ss.report(true); err != nil {
			ss.conn.Close() // the reader sees the error and ends the session
			return
		}
		t.Reset(iv)
	}
}

// readFailed turns a frame read error into the session's end.
func (ss *slaveSession) readFailed(err error) error {
	s := ss.s
	switch {
	case s.ctx.Err() != nil:
		return ErrClosed
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.log.Warn("closing idle master connection: nothing read", "idle", s.cfg.HousekeepingInterval, "retry_in", s.retryIn())
		return loggedError{fmt.Errorf("idle for %v: %w", s.cfg.HousekeepingInterval, err)}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("master closed the connection: %w", err)
	case errors.Is(err, transport.ErrFrameTooLarge), errors.Is(err, transport.ErrNegativeSize), errors.Is(err, transport.ErrNegativeOffset),
		errors.Is(err, transport.ErrBadHandshake), errors.Is(err, transport.ErrTooManyEpochs):
		s.log.Warn("closing master connection: malformed frame", "error", err, "max_frame_body", s.cfg.MaxFrameBody, "retry_in", s.retryIn())
		return loggedError{fmt.Errorf("malformed frame: %w", err)}
	case errors.Is(err, transport.ErrBadState):
		s.log.Warn("closing master connection: frame state is neither HANDSHAKE nor TRANSFER (a classic master?)", "error", err, "retry_in", s.retryIn())
		return loggedError{fmt.Errorf("state mismatch: %w", err)}
	default:
		return fmt.Errorf("read frame: %w", err)
	}
}

// mismatch ends the session on a frame whose offset is not the local max
// offset (RocketMQ: "master pushed offset not equal to slave max offset").
func (ss *slaveSession) mismatch(off int64, size int, cur int64) error {
	s := ss.s
	s.log.Warn("master pushed offset not equal to slave max offset; dropping connection",
		"frame_offset", off, "slave_max", cur, "body", size, "retry_in", s.retryIn())
	if s.met != nil {
		s.met.mismatches.Inc()
	}
	return loggedError{fmt.Errorf("%w: frame offset %d, slave max offset %d", ErrOffsetMismatch, off, cur)}
}

// segmentError records a segment-size mismatch (logged once per message).
func (s *SlaveNode) segmentError(line, msg string, args ...any) error {
	s.mu.Lock()
	s.status.SegmentError = msg
	s.segErr.Store(true)
	first := s.segLog != msg
	s.segLog = msg
	s.mu.Unlock()
	if first {
		s.log.Error(line, args...)
	}
	return loggedError{fmt.Errorf("%w: %s", store.ErrSegmentOverflow, msg)}
}

// appendFailed turns an append error for the frame [off, off+size) into
// the session's end.
func (s *SlaveNode) appendFailed(off int64, size int, err error) error {
	switch {
	case errors.Is(err, store.ErrSegmentOverflow):
		b := s.st.Bounds()
		return s.segmentError("frame crosses the slave's segment end: master and slave segment sizes differ; replication cannot proceed",
			fmt.Sprintf("frame [%d, %d) crosses this slave's segment end (segment size %d): master and slave segment sizes differ",
				off, off+int64(size), b.SegmentSize), "frame_offset", off, "body", size, "slave_segment_size", b.SegmentSize)
	case errors.Is(err, store.ErrOffsetMismatch):
		s.log.Warn("append refused: offset mismatch; dropping connection", "frame_offset", off, "error", err, "retry_in", s.retryIn())
		return loggedError{fmt.Errorf("append at %d: %w", off, err)}
	default:
		return fmt.Errorf("%w: append at %d: %w", errStopped, off, err)
	}
}

func (s *SlaveNode) clearSegmentError() {
	if !s.segErr.Load() {
		return
	}
	s.segErr.Store(false)
	s.mu.Lock()
	s.status.SegmentError = ""
	s.segLog = ""
	s.mu.Unlock()
}

// epochsOf converts the handshake's entries.
func epochsOf(es []transport.EpochEntry) []epoch.Entry {
	out := make([]epoch.Entry, len(es))
	for i, e := range es {
		out[i] = epoch.Entry{Epoch: e.Epoch, StartOffset: e.StartOffset}
	}
	return out
}
