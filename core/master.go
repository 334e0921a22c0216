package core

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sort"
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

// Master serves the commit log to slaves and runs group transfer.
//
// It is safe for concurrent use: Put may be called from many goroutines while
// the master serves its slaves.
type Master struct {
	st  store.Store
	tr  transport.Transport
	cfg MasterConfig
	log hclog.Logger
	met *masterMetrics

	closing chan struct{}   // closed by Close
	ctx     context.Context // canceled by Close (SyncStateSetConfirmer calls)
	stop    context.CancelFunc
	fenceCh chan struct{} // closed by Fence
	wg      sync.WaitGroup

	// Autoswitch: the epoch file and the epoch served (its last entry
	// when the master was created).
	epochs     *epoch.File
	epoch      int32
	epochStart int64
	confStored atomic.Int64 // the computed confirm offset (RocketMQ's confirmOffset field)
	confSingle atomic.Bool  // the SyncStateSet is the master alone: confirm offset = max offset (#7656)
	// puts is the number of messages of the Put and PutBatch calls running:
	// the slave writers coalesce the appends of concurrent puts into one
	// frame (writeLoop).
	puts atomic.Int32

	// mu guards everything below, the per-connection fields documented as
	// "guarded by Master.mu", and gt.
	mu       sync.Mutex
	ln       net.Listener
	addr     string
	started  bool
	closed   bool
	conns    map[*slaveConn]struct{}
	gt       *groupTransfer
	acks     []int64       // scratch for gt.update
	avail    []int64       // scratch for availableBelowLocked
	availBuf []int64       // scratch for availableBelowLocked's nthHighest
	changed  chan struct{} // closed and replaced whenever a slave connects, reports or leaves
	fence    error         // the fence reason, set once

	// Autoswitch.
	byID    map[int64]*slaveConn // handshaken connections by broker id
	sss     syncStateSet
	lastMin int64                // the store's min offset at the last epoch prefix truncation
	oorLog  map[string]time.Time // out-of-range ERROR last logged, per source host
}

// NewMaster returns a master over st that listens with tr. Start begins serving.
func NewMaster(st store.Store, tr transport.Transport, cfg MasterConfig) (*Master, error) {
	cfg, log, met, err := prepare(st != nil && tr != nil, cfg, "master", cfg.Logger, cfg.Registerer, newMasterMetrics)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	m := &Master{
		ctx:     ctx,
		stop:    stop,
		st:      st,
		tr:      tr,
		cfg:     cfg,
		log:     log,
		met:     met,
		closing: make(chan struct{}),
		fenceCh: make(chan struct{}),
		conns:   make(map[*slaveConn]struct{}),
		gt:      newGroupTransfer(cfg.SyncAcks),
		changed: make(chan struct{}),
	}
	if cfg.Protocol == ProtocolAutoSwitch {
		last, ok := cfg.Epochs.Last()
		if !ok {
			stop()
			return nil, fmt.Errorf("%w: autoswitch master: the epoch file is empty (become master of an epoch first)", ErrInvalidConfig)
		}
		m.epochs, m.epoch, m.epochStart = cfg.Epochs, last.Epoch, last.StartOffset
		m.byID = make(map[int64]*slaveConn)
		m.sss = newSyncStateSet(cfg.BrokerID)
		m.lastMin = st.Bounds().Min
		m.mu.Lock()
		m.computeConfirmLocked()
		m.updateQuorumLocked()
		m.mu.Unlock()
	}
	return m, nil
}

// Start opens the HA listener and starts the accept loop.
func (m *Master) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := startable(m.closed, m.started); err != nil {
		return err
	}
	ln, err := m.tr.Listen(m.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("replicator: master listen on %s: %w", m.cfg.ListenAddr, err)
	}
	m.ln = ln
	m.addr = ln.Addr().String()
	m.started = true
	m.log.Info("HA service listening", "addr", m.addr, "role", m.cfg.Role.String(), "sync_acks", m.cfg.SyncAcks,
		"protocol", m.cfg.Protocol.String(), "epoch", m.epoch)
	m.wg.Add(1)
	go m.acceptLoop(ln)
	if m.cfg.Protocol == ProtocolAutoSwitch {
		m.wg.Add(1)
		go m.checkLoop()
	}
	return nil
}

// Addr is the bound HA listen address (useful with port 0). It is "" before
// Start.
func (m *Master) Addr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addr
}

func (m *Master) acceptLoop(ln net.Listener) {
	defer m.wg.Done()
	var bo backoff.Backoff
	for {
		conn, err := ln.Accept()
		if err != nil {
			if backoff.Stopped(err, m.closing) {
				return
			}
			// Transient accept failures (file descriptors exhausted, ...):
			// back off like net/http and keep serving.
			d := bo.Next()
			m.log.Error("accept failed; retrying", "error", err, "backoff", d)
			if !backoff.Sleep(d, m.closing) {
				return
			}
			continue
		}
		bo.Reset()
		m.serve(conn)
	}
}

// serve registers conn and starts its reader and writer.
func (m *Master) serve(conn net.Conn) {
	addr := conn.RemoteAddr().String()
	c := &slaveConn{
		m:        m,
		conn:     conn,
		addr:     addr,
		log:      m.log.With("slave", addr),
		reqCh:    make(chan struct{}),
		wdone:    make(chan struct{}),
		done:     make(chan struct{}),
		hsCh:     make(chan struct{}),
		request:  -1,
		ack:      -1,
		brokerID: -1,
		since:    time.Now(),
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		conn.Close()
		return
	}
	m.conns[c] = struct{}{}
	m.notifyLocked()
	n := len(m.conns)
	m.mu.Unlock()
	if m.met != nil {
		m.met.conns.Inc()
		m.met.connsTotal.Inc()
		c.ackGauge = m.met.ackOffset.WithLabelValues(addr)
		c.lagGauge = m.met.lag.WithLabelValues(addr)
	}
	c.log.Info("slave connected", "connections", n)
	m.wg.Add(2)
	go c.writeLoop()
	go func() {
		defer m.wg.Done()
		c.readLoop()
		<-c.writerDone()
		m.removeConn(c)
	}()
}

// removeConn forgets c once both its goroutines have exited and logs the
// one line that says why the connection closed.
func (m *Master) removeConn(c *slaveConn) {
	m.mu.Lock()
	delete(m.conns, c)
	if m.byID != nil && c.hsRead && m.byID[c.brokerID] == c {
		delete(m.byID, c.brokerID)
		m.memberGoneLocked(c.brokerID)
	}
	m.updateQuorumLocked()
	m.notifyLocked()
	n := len(m.conns)
	m.mu.Unlock()
	if m.met != nil {
		m.met.conns.Dec()
		m.met.ackOffset.DeleteLabelValues(c.addr)
		m.met.lag.DeleteLabelValues(c.addr)
		m.met.closes.WithLabelValues(c.reason.kind).Inc()
	}
	args := append([]any{"reason", c.reason.kind, "connections", n, "duration", time.Since(c.since)}, c.reason.args...)
	c.log.Log(c.reason.level, c.reason.msg, args...)
}

// notifyLocked wakes WaitSlaves callers.
func (m *Master) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// updateQuorumLocked recomputes the group-transfer quorum from the
// connected slaves' counted acks and releases the puts it covers.
func (m *Master) updateQuorumLocked() {
	if m.cfg.Protocol == ProtocolAutoSwitch && m.cfg.SyncAcks == 0 {
		m.gt.release(m.memberQuorumLocked())
		return
	}
	m.acks = m.acks[:0]
	for c := range m.conns {
		if c.counted && c.ackCounts() {
			m.acks = append(m.acks, c.ack)
		}
	}
	m.gt.update(m.acks)
}

// onReport records a slave's report: the request offset if it is the first,
// and the ack. counted says whether the ack may release sync puts (it is
// within the master's log). The quorum is recomputed on every report:
// O(connections), plus O(log n) per released waiter.
func (m *Master) onReport(c *slaveConn, v int64, counted bool) {
	now := time.Now()
	m.mu.Lock()
	if c.request < 0 {
		c.request = v
		close(c.reqCh)
		m.notifyLocked()
	}
	c.ack = v
	c.lastAck = now
	c.counted = counted
	if m.byID != nil {
		m.onAckLocked(c, v, now)
	}
	m.updateQuorumLocked()
	m.mu.Unlock()
}

// WaitSlaves blocks until at least n slaves are connected and have sent
// their first report, or ctx ends, or the master closes.
func (m *Master) WaitSlaves(ctx context.Context, n int) error {
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return ErrClosed
		}
		k := 0
		for c := range m.conns {
			if c.request >= 0 {
				k++
			}
		}
		ch := m.changed
		m.mu.Unlock()
		if k >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Put appends msg and, for SyncMaster, waits for slave acks.
//
// The message is stored whenever the error is nil, whatever the status (as
// in RocketMQ, FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT and
// SLAVE_NOT_AVAILABLE all mean "stored on the master"). The status combines
// the store's sync flush and the replica wait as RocketMQ's
// handleDiskFlushAndHA does: a replica status other than PUT_OK wins, then a
// flush timeout. If ctx ends while the put waits for slaves, Put returns the
// result with FLUSH_SLAVE_TIMEOUT and ctx's error: the message is stored but
// its replication is unknown. Put is PutBatch of one message.
func (m *Master) Put(ctx context.Context, msg *record.Message) (PutResult, error) {
	msgs := [1]*record.Message{msg}
	var out [1]BatchPut
	m.putBatch(ctx, msgs[:], out[:])
	return out[0].PutResult, out[0].Err
}

// waitSlaves is the SYNC_MASTER replica wait for the stored records of
// out (ascending next offsets): one waiter for them all. It sets the
// status (when not PUT_OK) and error of each as Put's wait would have for
// that record alone: SLAVE_NOT_AVAILABLE past the offsets the slaves are
// within SlaveFallBehindMax of; PUT_OK for a record some quorum covered
// while the batch waited, even when a later record timed out; otherwise
// FLUSH_SLAVE_TIMEOUT, with ctx's or the fence's error when that ended the
// wait.
func (m *Master) waitSlaves(ctx context.Context, out []BatchPut) {
	start := time.Now()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		setStatus(out, FlushSlaveTimeout, nil)
		return
	}
	limit := m.availableBelowLocked()
	k := sort.Search(len(out), func(i int) bool { return out[i].NextOffset >= limit })
	if k < len(out) {
		setStatus(out[k:], SlaveNotAvailable, nil)
		m.log.Debug("slave not available for sync put", "next_offset", out[k].NextOffset, "puts", len(out)-k)
	}
	if k == 0 {
		m.mu.Unlock()
		return
	}
	var w *syncWaiter
	if k == 1 {
		w = m.gt.add(out[0].NextOffset)
	} else {
		offs := make([]int64, k)
		for i := range offs {
			offs[i] = out[i].NextOffset
		}
		w = m.gt.addBatch(offs)
	}
	m.mu.Unlock()
	covered, err := m.await(ctx, w, k)
	m.observeWait(start)
	if covered == k {
		return
	}
	if err == nil && m.fenced() == nil {
		m.log.Warn("sync put timed out waiting for slave acks", "next_offset", out[covered].NextOffset, "timeout", m.cfg.SlaveTimeout)
	}
	setStatus(out[covered:k], FlushSlaveTimeout, err)
}

// setStatus gives each of out the replica status st (unless PUT_OK, which
// leaves the store's status) and the error err.
func setStatus(out []BatchPut, st PutStatus, err error) {
	for i := range out {
		if st != PutOK {
			out[i].Status = st
		}
		out[i].Err = err
	}
}

// waitLag is the AsyncMaster back-pressure (MaxLag): it waits until the
// group-transfer quorum is within MaxLag of next, at most SlaveTimeout, and
// not at all when no slave is available. It returns only ctx's error: the
// put is stored and answered PUT_OK whatever happens here.
func (m *Master) waitLag(ctx context.Context, next int64) error {
	m.mu.Lock()
	if m.closed || next >= m.availableBelowLocked() {
		m.mu.Unlock()
		return nil
	}
	w := m.gt.add(next - m.cfg.MaxLag)
	m.mu.Unlock()
	if w == nil {
		return nil
	}
	start := time.Now()
	covered, err := m.await(ctx, w, 1)
	if m.met != nil {
		m.met.lagWait.Observe(time.Since(start).Seconds())
	}
	if covered == 0 && err == nil {
		m.log.Debug("async put stopped waiting for the slave to come within max lag", "next_offset", next, "max_lag", m.cfg.MaxLag, "timeout", m.cfg.SlaveTimeout)
	}
	return err
}

// await waits until the quorum covers the n records of w (nil: all covered
// already), at most SlaveTimeout, or until ctx ends or the master closes;
// then it takes w out of the queue. covered is the number of records (a
// prefix) some quorum covered, counting acks that came while it was giving
// up; err is ctx's or the fence's error if that ended the wait.
func (m *Master) await(ctx context.Context, w *syncWaiter, n int) (covered int, err error) {
	if w == nil {
		return n, nil
	}
	t := time.NewTimer(m.cfg.SlaveTimeout)
	defer t.Stop()
	select {
	case <-w.done:
		return n, nil
	case <-t.C:
	case <-ctx.Done():
		err = ctx.Err()
	case <-m.fenceCh:
		err = m.fenced()
	case <-m.closing:
	}
	m.mu.Lock()
	removed := m.gt.remove(w)
	covered = w.covered
	m.mu.Unlock()
	if !removed {
		return n, nil // covered while we were giving up
	}
	return covered, err
}

func (m *Master) observeWait(start time.Time) {
	if m.met != nil {
		m.met.syncWait.Observe(time.Since(start).Seconds())
	}
}

// availableBelowLocked is RocketMQ's isSlaveOK generalised to SyncAcks
// and to a batch: a record ending at next has its slaves available when
// next is below the result, that is when at least SyncAcks connected
// slaves are less than SlaveFallBehindMax behind next. A slave that has
// not reported yet counts as acked at 0. With fewer than SyncAcks slaves
// no offset is available (math.MinInt64); in autoswitch with SyncAcks 0
// every one is (math.MaxInt64).
func (m *Master) availableBelowLocked() int64 {
	if m.cfg.Protocol == ProtocolAutoSwitch && m.cfg.SyncAcks == 0 {
		return math.MaxInt64 // RocketMQ 5 has no SLAVE_NOT_AVAILABLE: the set decides
	}
	m.avail = m.avail[:0]
	for c := range m.conns {
		if !c.ackCounts() {
			continue
		}
		ack := int64(0)
		if c.counted {
			ack = c.ack
		}
		m.avail = append(m.avail, ack)
	}
	q := nthHighest(m.avail, m.cfg.SyncAcks, &m.availBuf)
	switch {
	case q < 0:
		return math.MinInt64
	case q > math.MaxInt64-m.cfg.SlaveFallBehindMax:
		return math.MaxInt64
	}
	return q + m.cfg.SlaveFallBehindMax
}

// Status reports the master and its slaves.
func (m *Master) Status() MasterStatus {
	maxOff := m.st.Bounds().Max
	m.mu.Lock()
	defer m.mu.Unlock()
	st := MasterStatus{Role: m.cfg.Role, Addr: m.addr, MaxOffset: maxOff, Protocol: m.cfg.Protocol, ConfirmOffset: maxOff}
	if m.fence != nil {
		st.Fenced = m.fence.Error()
	}
	if m.byID != nil {
		st.Epoch = m.epoch
		st.ConfirmOffset = m.reportedConfirm(maxOff)
		st.SyncStateSet = sortedIDs(m.sss.local)
		if m.sss.remote != nil {
			st.Proposed = sortedIDs(m.sss.remote)
		}
	}
	for c := range m.conns {
		si := SlaveInfo{
			Addr:          c.addr,
			RequestOffset: c.request,
			AckOffset:     c.ack,
			LastAck:       c.lastAck,
			NextTransfer:  c.next.Load(),
			OutOfRange:    c.outOfRange.Load(),
			BrokerID:      c.brokerID,
			AsyncLearner:  c.learner,
		}
		if m.byID != nil {
			si.HAState = c.haState().String()
			_, si.InSync = m.sss.local[c.brokerID]
			si.InSync = si.InSync && c.hsRead && m.byID[c.brokerID] == c
		}
		if c.ack >= 0 {
			si.LagBytes = max(maxOff-c.ack, 0) // an out-of-range slave may be ahead
		} else {
			si.LagBytes = maxOff
		}
		st.Slaves = append(st.Slaves, si)
	}
	slicesSortSlaves(st.Slaves)
	return st
}

// Close stops accepting, closes slave connections, releases waiters
// (FLUSH_SLAVE_TIMEOUT) and waits for every goroutine. Idempotent. It does
// not close the store.
func (m *Master) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.wg.Wait()
		return nil
	}
	m.closed = true
	close(m.closing)
	m.stop()
	m.notifyLocked()
	ln := m.ln
	conns := make([]*slaveConn, 0, len(m.conns))
	for c := range m.conns {
		conns = append(conns, c)
	}
	m.mu.Unlock()
	var err error
	if ln != nil {
		if cerr := ln.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
			err = fmt.Errorf("replicator: close HA listener: %w", cerr)
		}
	}
	for _, c := range conns {
		c.closeWith(hclog.Info, "slave connection closed: master shutting down", "shutdown")
	}
	m.wg.Wait()
	m.log.Info("HA service stopped")
	return err
}
