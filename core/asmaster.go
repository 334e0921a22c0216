package core

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/replicatorhq/replicator/transport"
)

// The master side of the autoswitch protocol (RocketMQ 5's
// AutoSwitchHAConnection and the SyncStateSet of AutoSwitchHAService).

// syncStateSet is the master's in-sync set. Guarded by Master.mu.
type syncStateSet struct {
	self   int64              // the master's broker id, always a member
	local  map[int64]struct{} // the set in effect (confirmed)
	remote map[int64]struct{} // a proposed set in flight; nil when none
}

func newSyncStateSet(self int64) syncStateSet {
	return syncStateSet{self: self, local: map[int64]struct{}{self: {}}}
}

// asReadLoop parses the slave's 16-byte handshake and 12-byte acks. Any
// state other than HANDSHAKE or TRANSFER, an ack before the handshake or a
// handshake after the first ack closes the connection with one log line.
func (c *slaveConn) asReadLoop() {
	sr := transport.NewSlaveFrameReader(transport.NewConnReader(c.conn, c.m.cfg.HousekeepingInterval))
	for {
		f, err := sr.Next()
		switch {
		case errors.Is(err, transport.ErrBadState):
			c.closeWith(hclog.Warn, "closing slave connection: frame state is neither HANDSHAKE nor TRANSFER (a classic slave on an autoswitch master?)",
				"bad_state", "error", err)
			return
		case errors.Is(err, transport.ErrNegativeOffset):
			c.closeWith(hclog.Warn, "closing slave connection: negative ack", "malformed", "error", err)
			return
		case err != nil:
			c.closeOnError("read", err)
			return
		}
		switch f.State {
		case transport.StateHandshake:
			if !c.m.onHandshake(c, f.Handshake) {
				return
			}
		case transport.StateTransfer:
			c.m.mu.Lock()
			hs := c.hsRead
			c.m.mu.Unlock()
			if !hs {
				c.closeWith(hclog.Warn, "closing slave connection: state mismatch: TRANSFER ack before the HANDSHAKE", "state_mismatch",
					"state", transport.StateTransfer.String(), "expected", transport.StateHandshake.String(), "ack", f.Offset)
				return
			}
			if !c.ack1(f.Offset) {
				return
			}
		}
	}
}

// transfers remembers when the writer sent what: the master's max offset
// at each recent transfer and its time, one record per transferGrain at
// most (the newest transfer of a grain raises the grain's max offset,
// keeping its time: an ack that reaches it proves the slave caught up at
// least as of then). Written by the writer, read by the reader.
type transfers struct {
	mu   sync.Mutex
	recs [transferRecs]transferRec
	n    int // records written; the newest is recs[(n-1)%transferRecs]
}

type transferRec struct {
	max int64
	at  time.Time
}

// transferRecs records of transferGrain span at least 6.4 s of transfers:
// an ack that lags less than that finds the transfer it reached.
const (
	transferRecs  = 128
	transferGrain = 50 * time.Millisecond
)

// add records a transfer sent at t while the master's max offset was max.
func (x *transfers) add(max int64, t time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.n > 0 {
		last := &x.recs[(x.n-1)%transferRecs]
		if t.Sub(last.at) < transferGrain {
			last.max = max
			return
		}
	}
	x.recs[x.n%transferRecs] = transferRec{max: max, at: t}
	x.n++
}

// caughtUpAt returns the time of the newest transfer whose max offset v
// reaches; false when v reaches none that is remembered.
func (x *transfers) caughtUpAt(v int64) (time.Time, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i := x.n - 1; i >= 0 && i >= x.n-transferRecs; i-- {
		if r := x.recs[i%transferRecs]; v >= r.max {
			return r.at, true
		}
	}
	return time.Time{}, false
}

// onHandshake records the slave's handshake. A live connection with the
// same broker id is replaced (closed). It returns false when it closed c.
func (m *Master) onHandshake(c *slaveConn, h transport.SlaveHandshake) bool {
	m.mu.Lock()
	if c.hsRead {
		started := c.request >= 0
		m.mu.Unlock()
		if started {
			c.closeWith(hclog.Warn, "closing slave connection: state mismatch: HANDSHAKE after the transfer started", "state_mismatch",
				"state", transport.StateHandshake.String(), "expected", transport.StateTransfer.String())
			return false
		}
		return true // a repeated handshake (a Java slave re-sends it after 5 s): answered once
	}
	if h.BrokerID == m.cfg.BrokerID {
		m.mu.Unlock()
		c.closeWith(hclog.Error, "closing slave connection: the slave's broker id is the master's own", "bad_broker_id", "broker_id", h.BrokerID)
		return false
	}
	old := m.byID[h.BrokerID]
	c.hsRead, c.brokerID, c.learner, c.syncFromLast = true, h.BrokerID, h.AsyncLearner, h.SyncFromLastFile
	// The caught-up clock moves only on acks: a connection that replaces
	// a live one of the same broker id keeps its time, a new one starts
	// with none (a member reconnecting while its drop is in flight leaves
	// at the next check unless it acks the master's max offset first).
	if old != nil {
		c.caughtUp = old.caughtUp
	}
	m.byID[h.BrokerID] = c
	c.log = c.log.With("broker_id", h.BrokerID) // before the writer may read it
	close(c.hsCh)
	m.notifyLocked()
	m.mu.Unlock()
	c.log.Info("slave handshake", "sync_from_last_file", h.SyncFromLastFile, "async_learner", h.AsyncLearner)
	if old != nil {
		c.log.Warn("a new connection with a live connection's broker id replaces it", "older", old.addr)
		old.closeWith(hclog.Warn, "slave connection replaced by a newer one with the same broker id", "replaced",
			"broker_id", h.BrokerID, "newer", c.addr)
	}
	return true
}

// sendHandshake writes the master handshake: max offset, last epoch and the
// epoch entries. It returns false when it closed the connection.
func (c *slaveConn) sendHandshake() bool {
	m := c.m
	maxOff := m.st.Bounds().Max
	es := m.epochs.Entries()
	h := transport.MasterHandshake{MaxOffset: maxOff, Epochs: make([]transport.EpochEntry, len(es))}
	for i, e := range es {
		h.Epochs[i] = transport.EpochEntry{Epoch: e.Epoch, StartOffset: e.StartOffset}
	}
	if len(es) > 0 {
		h.LastEpoch = es[len(es)-1].Epoch
	}
	b, err := transport.AppendMasterHandshake(nil, h)
	if err != nil {
		c.closeWith(hclog.Error, "closing slave connection: the epoch file has more entries than a handshake carries; truncate the epoch history",
			"too_many_epochs", "entries", len(es), "limit", transport.MaxHandshakeEpochs, "error", err)
		return false
	}
	if _, err := c.conn.Write(b); err != nil {
		c.closeOnError("write", fmt.Errorf("write handshake: %w", err))
		return false
	}
	c.log.Debug("handshake sent", "max_offset", maxOff, "last_epoch", h.LastEpoch, "entries", len(es))
	return true
}

// onAckLocked is the autoswitch part of an ack: caught-up time, SyncStateSet
// expansion, confirm offset. The caller holds m.mu.
//
// Acks are the only evidence that a slave holds the master's bytes, so
// they alone move its caught-up time (AutoSwitchHAConnection's
// maybeExpandInSyncStateSet): an ack of the master's max offset catches
// the slave up now; an ack that reaches the max offset the writer saw at
// a recent transfer catches it up at that transfer's time (RocketMQ keeps
// the last transfer only, so that a slave a frame behind a master that
// never stops writing never catches up); anything less leaves the time as
// it was. The time never moves back. Bytes that left the master's socket
// prove nothing: over a silent partition the socket keeps accepting
// heartbeats and the little that timed-out puts write.
func (m *Master) onAckLocked(c *slaveConn, v int64, now time.Time) {
	if c.learner || m.byID[c.brokerID] != c {
		return
	}
	maxOff := m.st.Bounds().Max
	at, ok := now, v >= maxOff
	if !ok {
		at, ok = c.xfers.caughtUpAt(v)
	}
	if ok && at.After(c.caughtUp) {
		c.caughtUp = at
	}
	_, member := m.sss.local[c.brokerID]
	if member {
		m.computeConfirmLocked()
		return
	}
	if m.sss.remote == nil && m.fence == nil && v >= m.reportedConfirm(maxOff) && v >= m.epochStart {
		// Joining is catching up: the ack holds everything the set
		// confirmed, so the member's clock starts now.
		c.caughtUp = now
		next := maps.Clone(m.sss.local)
		next[c.brokerID] = struct{}{}
		c.log.Info("slave caught up: proposing it for the in-sync set", "ack", v, "confirm_offset", m.reportedConfirm(maxOff))
		m.proposeLocked(next)
	}
}

// memberGoneLocked drops a member whose last connection closed at once
// (unless a change is in flight; the periodic check drops it then).
func (m *Master) memberGoneLocked(id int64) {
	if _, ok := m.sss.local[id]; !ok {
		m.computeConfirmLocked()
		return
	}
	if m.sss.remote != nil {
		return
	}
	next := maps.Clone(m.sss.local)
	delete(next, id)
	m.log.Info("in-sync slave disconnected: proposing to drop it from the in-sync set", "broker_id", id)
	m.proposeLocked(next)
}

// proposeLocked changes the SyncStateSet to next: at once without a
// confirmer, else through it (the union of both sets applies to waits
// meanwhile). The caller holds m.mu.
//
// A fenced master's set is frozen: a member that leaves during a failover
// (the one being promoted) must not release the puts that wait for it.
func (m *Master) proposeLocked(next map[int64]struct{}) {
	if m.fence != nil {
		m.log.Debug("in-sync set frozen: the master is fenced", "proposed", sortedIDs(next))
		return
	}
	next[m.sss.self] = struct{}{}
	if m.cfg.SyncStateSetConfirmer == nil {
		m.applySetLocked(next)
		return
	}
	m.sss.remote = next
	m.updateQuorumLocked()
	ids := sortedIDs(next)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		got, err := m.cfg.SyncStateSetConfirmer.Propose(m.ctx, m.epoch, ids)
		m.mu.Lock()
		defer m.mu.Unlock()
		m.sss.remote = nil
		if err == nil && m.fence != nil {
			err = m.fence // frozen while fenced
		}
		if err != nil {
			m.log.Warn("in-sync set change not confirmed; keeping the current set", "proposed", ids, "current", sortedIDs(m.sss.local), "error", err)
			m.updateQuorumLocked()
			return
		}
		set := make(map[int64]struct{}, len(got)+1)
		for _, id := range got {
			set[id] = struct{}{}
		}
		set[m.sss.self] = struct{}{}
		m.applySetLocked(set)
	}()
}

// applySetLocked puts set in effect.
func (m *Master) applySetLocked(set map[int64]struct{}) {
	old := sortedIDs(m.sss.local)
	m.sss.local = set
	m.computeConfirmLocked()
	m.updateQuorumLocked()
	m.notifyLocked()
	m.log.Info("in-sync set changed", "from", old, "to", sortedIDs(set), "epoch", m.epoch)
	if m.met != nil && m.met.syncSet != nil {
		m.met.syncSet.Set(float64(len(set)))
	}
}

// memberQuorumLocked is the highest offset every member but the master
// holds, over the union of the current and a proposed set (#5663);
// math.MaxInt64 when the master is alone (a sync put needs no slave, as
// RocketMQ with a set of one). A member without a handshaken connection
// holds nothing.
func (m *Master) memberQuorumLocked() int64 {
	q := int64(math.MaxInt64)
	visit := func(set map[int64]struct{}) {
		for id := range set {
			if id == m.sss.self {
				continue
			}
			a := int64(-1)
			if c := m.byID[id]; c != nil && c.counted {
				a = c.ack
			}
			q = min(q, a)
		}
	}
	visit(m.sss.local)
	visit(m.sss.remote)
	return q
}

// computeConfirmLocked is RocketMQ's computeConfirmOffset: the minimum ack
// of the connected members (acks of 0 skipped, #6728), starting from the
// master's max offset; a member without a connection keeps the previous
// value (#6662). A set of one reports the max offset (#7656).
func (m *Master) computeConfirmLocked() {
	maxOff := m.st.Bounds().Max
	if len(m.sss.local) <= 1 {
		m.confSingle.Store(true)
		m.confStored.Store(maxOff)
		return
	}
	m.confSingle.Store(false)
	conf := maxOff
	for id := range m.sss.local {
		if id == m.sss.self {
			continue
		}
		c := m.byID[id]
		if c == nil {
			return
		}
		if c.ack > 0 && c.ack < conf {
			conf = c.ack
		}
	}
	m.confStored.Store(conf)
}

// reportedConfirm is the confirm offset sent in transfer headers.
func (m *Master) reportedConfirm(maxOff int64) int64 {
	if m.confSingle.Load() {
		return maxOff
	}
	return m.confStored.Load()
}

// ConfirmOffset is the master's confirm offset (autoswitch); classic: the
// max offset.
func (m *Master) ConfirmOffset() int64 {
	maxOff := m.st.Bounds().Max
	if m.byID == nil {
		return maxOff
	}
	return m.reportedConfirm(maxOff)
}

// checkLoop runs every CheckSyncStateSetPeriod: it drops members that have
// not caught up for MaxTimeSlaveNotCatchup or have no connection, and
// truncates the epoch file's prefix when retention moved the store's min
// offset.
func (m *Master) checkLoop() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.CheckSyncStateSetPeriod)
	defer t.Stop()
	for {
		select {
		case <-m.closing:
			return
		case <-t.C:
		}
		m.checkSyncStateSet()
		m.truncateEpochPrefix()
	}
}

func (m *Master) checkSyncStateSet() {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sss.remote != nil {
		return
	}
	var next map[int64]struct{}
	for id := range m.sss.local {
		if id == m.sss.self {
			continue
		}
		c := m.byID[id]
		if c != nil && now.Sub(c.caughtUp) <= m.cfg.MaxTimeSlaveNotCatchup {
			continue
		}
		if next == nil {
			next = maps.Clone(m.sss.local)
		}
		delete(next, id)
		if c != nil {
			args := []any{"broker_id", id, "ack", c.ack, "max_time_not_catchup", m.cfg.MaxTimeSlaveNotCatchup}
			if !c.caughtUp.IsZero() {
				args = append(args, "since", c.caughtUp, "for", now.Sub(c.caughtUp).Round(time.Millisecond))
			}
			m.log.Warn("in-sync slave has not acknowledged the master's max offset for too long: proposing to drop it from the in-sync set", args...)
		}
	}
	if next != nil {
		m.proposeLocked(next)
	}
}

func (m *Master) truncateEpochPrefix() {
	minOff := m.st.Bounds().Min
	m.mu.Lock()
	moved := minOff > m.lastMin
	m.lastMin = max(m.lastMin, minOff)
	m.mu.Unlock()
	if !moved {
		return
	}
	if err := m.epochs.TruncatePrefixByOffset(minOff); err != nil {
		m.log.Error("epoch file prefix truncation failed", "min_offset", minOff, "error", err)
	}
}

// Fence refuses new puts with ErrFenced at once and fails the puts waiting
// for slave acks with ErrFenced (their messages are stored on this node
// but may be cut when it becomes a slave). reason is wrapped in the errors;
// nil means ErrFenced. Idempotent: the first reason stays.
func (m *Master) Fence(reason error) {
	if reason == nil {
		reason = ErrFenced
	}
	m.mu.Lock()
	if m.fence != nil {
		m.mu.Unlock()
		return
	}
	m.fence = reason
	close(m.fenceCh)
	m.mu.Unlock()
	m.log.Warn("master fenced: refusing puts, failing waiting sync puts", "reason", reason)
}

// fenced returns the error for a fenced master, nil otherwise.
func (m *Master) fenced() error {
	select {
	case <-m.fenceCh:
	default:
		return nil
	}
	m.mu.Lock()
	r := m.fence
	m.mu.Unlock()
	if errors.Is(r, ErrFenced) {
		return r
	}
	return fmt.Errorf("%w: %w", ErrFenced, r)
}
