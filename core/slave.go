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

	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/transport"
)

// SlaveNode follows a master and appends what it ships (RocketMQ's
// HAClient, with 5.x housekeeping semantics and an immediate first report).
//
// It is safe for concurrent use.
type SlaveNode struct {
	st  store.Store
	tr  transport.Transport
	cfg SlaveConfig
	log hclog.Logger
	met *slaveMetrics

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex // guards everything below
	started bool
	closed  bool
	conn    net.Conn // the current connection, closed by Close
	status  SlaveStatus
	segLog  string // SegmentError already logged

	lastFrame atomic.Int64 // Unix nanoseconds of the last frame read; 0 = none
	ackSent   atomic.Int64 // last offset reported; -1 before any
	segErr    atomic.Bool  // status.SegmentError is set
}

// NewSlave returns a slave HA client over st. Start begins replicating.
func NewSlave(st store.Store, tr transport.Transport, cfg SlaveConfig) (*SlaveNode, error) {
	if st == nil || tr == nil {
		return nil, fmt.Errorf("%w: nil store or transport", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	met, err := newSlaveMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("replicator: slave metrics: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &SlaveNode{
		st:     st,
		tr:     tr,
		cfg:    cfg,
		log:    log.Named("slave").With("master", cfg.MasterAddr),
		met:    met,
		ctx:    ctx,
		cancel: cancel,
		status: SlaveStatus{MasterAddr: cfg.MasterAddr},
	}
	s.ackSent.Store(-1)
	return s, nil
}

// Start launches the HA client loop.
func (s *SlaveNode) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrClosed
	case s.started:
		return ErrAlreadyStarted
	}
	s.started = true
	s.wg.Add(1)
	go s.run()
	return nil
}

// Status reports the HA client.
func (s *SlaveNode) Status() SlaveStatus {
	maxOff := s.st.Bounds().Max
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.MaxOffset = maxOff
	st.AckSent = s.ackSent.Load()
	if ns := s.lastFrame.Load(); ns != 0 {
		st.LastFrameTime = time.Unix(0, ns)
	}
	return st
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

// run is the client loop: connect, replicate until the connection drops,
// wait ReconnectDelay, again.
func (s *SlaveNode) run() {
	defer s.wg.Done()
	for attempt := 0; ; attempt++ {
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
		t := time.NewTimer(s.cfg.ReconnectDelay)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return
		}
	}
}

func (s *SlaveNode) setError(err error) {
	s.mu.Lock()
	s.status.LastError = err.Error()
	s.mu.Unlock()
}

// session runs one connection to the master. It returns why it ended.
func (s *SlaveNode) session() error {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ConnectTimeout)
	conn, err := s.tr.Dial(ctx, s.cfg.MasterAddr)
	cancel()
	if err != nil {
		if s.ctx.Err() == nil {
			s.log.Warn("connect to master failed", "error", err, "retry_in", s.cfg.ReconnectDelay)
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

	ss := &slaveSession{s: s, conn: conn, rw: transport.NewReportWriter(conn), done: make(chan struct{}), start: time.Now()}
	maxOff := s.st.Bounds().Max
	ss.max.Store(maxOff)
	s.log.Info("connected to master", "local_addr", conn.LocalAddr().String(), "max_offset", maxOff)
	s.mu.Lock()
	s.status.Connected = true
	s.status.LastError = ""
	s.mu.Unlock()
	if s.met != nil {
		s.met.connected.Set(1)
	}

	err = ss.run()

	conn.Close()
	s.mu.Lock()
	s.conn = nil
	s.status.Connected = false
	if err != nil && s.ctx.Err() == nil {
		s.status.LastError = err.Error()
	}
	s.mu.Unlock()
	if s.met != nil {
		s.met.connected.Set(0)
	}
	var le loggedError
	if s.ctx.Err() == nil && !errors.As(err, &le) && !errors.Is(err, errStopped) {
		s.log.Info("disconnected from master", "reason", err, "retry_in", s.cfg.ReconnectDelay)
	}
	return err
}

// slaveSession is one connection: a reader goroutine (the caller of run)
// applying frames, and a reporter goroutine sending the max offset at least
// every ReportInterval.
type slaveSession struct {
	s    *SlaveNode
	conn net.Conn
	max  atomic.Int64 // the local max offset

	// Reports are written by whichever goroutine holds wmu; the other one
	// never waits for it: it sets pending (and force) and returns, and the
	// holder writes the latest max offset before it lets go. So neither the
	// frame reader nor the reporter ever blocks behind the other's write.
	wmu      sync.Mutex // guards rw and lastSent
	rw       *transport.ReportWriter
	lastSent int64
	pending  atomic.Bool
	force    atomic.Bool
	start    time.Time    // session start, the base of lastTime
	lastTime atomic.Int64 // time of the last report, as a duration since start

	done chan struct{} // closed when the reader ends
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
			err = ss.rw.WriteReport(v)
			if err == nil {
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
	// The first report goes out at once (RocketMQ 4.x waits 5 s): it is the
	// request offset.
	if err := ss.report(true); err != nil {
		return err
	}
	var rwg sync.WaitGroup
	rwg.Add(1)
	go func() {
		defer rwg.Done()
		ss.reportLoop()
	}()
	err := ss.readLoop()
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

// readLoop parses frames and applies them (RocketMQ dispatchReadRequest).
// With a store that implements AppenderFrom on a connection with a file
// descriptor, bodies go straight from the socket into the store
// (directLoop); otherwise through a FrameReader's buffer and AppendAt.
func (ss *slaveSession) readLoop() error {
	s := ss.s
	if app, ok := s.st.(AppenderFrom); ok {
		if vr, ok := newSocketVec(ss); ok {
			return ss.directLoop(app, vr)
		}
	}
	fr := transport.NewFrameReader(sessionReader{ss}, s.cfg.MaxFrameBody)
	for {
		f, err := fr.Next()
		if err != nil {
			return ss.readFailed(err)
		}
		now := time.Now()
		cur := ss.max.Load()
		if cur != 0 && f.Offset != cur {
			return ss.mismatch(f.Offset, len(f.Body), cur)
		}
		s.lastFrame.Store(now.UnixNano())
		if len(f.Body) == 0 {
			if s.met != nil {
				s.met.heartbeats.Inc()
			}
			continue
		}
		newMax, err := s.st.AppendAt(f.Offset, f.Body)
		if err != nil {
			return s.appendFailed(f.Offset, len(f.Body), err)
		}
		ss.max.Store(newMax)
		s.clearSegmentError()
		if s.met != nil {
			s.met.recvBytes.Add(float64(len(f.Body)))
			s.met.recvFrames.Inc()
		}
	}
}

// readFailed turns a frame read error into the session's end.
func (ss *slaveSession) readFailed(err error) error {
	s := ss.s
	switch {
	case s.ctx.Err() != nil:
		return ErrClosed
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.log.Warn("closing idle master connection: nothing read", "idle", s.cfg.HousekeepingInterval, "retry_in", s.cfg.ReconnectDelay)
		return loggedError{fmt.Errorf("idle for %v: %w", s.cfg.HousekeepingInterval, err)}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("master closed the connection: %w", err)
	case errors.Is(err, transport.ErrFrameTooLarge), errors.Is(err, transport.ErrNegativeSize), errors.Is(err, transport.ErrNegativeOffset):
		s.log.Warn("closing master connection: malformed frame", "error", err, "max_frame_body", s.cfg.MaxFrameBody, "retry_in", s.cfg.ReconnectDelay)
		return loggedError{fmt.Errorf("malformed frame: %w", err)}
	default:
		return fmt.Errorf("read frame: %w", err)
	}
}

// mismatch ends the session on a frame whose offset is not the local max
// offset (RocketMQ: "master pushed offset not equal to slave max offset").
func (ss *slaveSession) mismatch(off int64, size int, cur int64) error {
	s := ss.s
	s.log.Warn("master pushed offset not equal to slave max offset; dropping connection",
		"frame_offset", off, "slave_max", cur, "body", size, "retry_in", s.cfg.ReconnectDelay)
	if s.met != nil {
		s.met.mismatches.Inc()
	}
	return loggedError{fmt.Errorf("%w: frame offset %d, slave max offset %d", ErrOffsetMismatch, off, cur)}
}

// appendFailed turns an AppendAt error for the frame [off, off+size) into
// the session's end.
func (s *SlaveNode) appendFailed(off int64, size int, err error) error {
	switch {
	case errors.Is(err, store.ErrSegmentOverflow):
		b := s.st.Bounds()
		msg := fmt.Sprintf("frame [%d, %d) crosses this slave's segment end (segment size %d): master and slave segment sizes differ",
			off, off+int64(size), b.SegmentSize)
		s.mu.Lock()
		s.status.SegmentError = msg
		s.segErr.Store(true)
		first := s.segLog != msg
		s.segLog = msg
		s.mu.Unlock()
		if first {
			s.log.Error("frame crosses the slave's segment end: master and slave segment sizes differ; replication cannot proceed",
				"frame_offset", off, "body", size, "slave_segment_size", b.SegmentSize)
		}
		return loggedError{fmt.Errorf("append at %d: %w", off, err)}
	case errors.Is(err, store.ErrOffsetMismatch):
		s.log.Warn("append refused: offset mismatch; dropping connection", "frame_offset", off, "error", err, "retry_in", s.cfg.ReconnectDelay)
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

// sessionReader is the slave's socket reader. The FrameReader calls it only
// when no complete frame is buffered, that is, after it applied every frame
// the last read delivered: that is when the slave reports its new max offset
// (one report per applied batch that grew it, as RocketMQ's
// reportSlaveMaxOffsetPlus after dispatchReadRequest). Every read gets a
// deadline of HousekeepingInterval: a connection that reads nothing for that
// long closes.
type sessionReader struct{ ss *slaveSession }

func (r sessionReader) Read(p []byte) (int, error) {
	ss := r.ss
	if err := ss.report(false); err != nil {
		return 0, err
	}
	return deadlineReader{ss.conn, ss.s.cfg.HousekeepingInterval}.Read(p)
}
