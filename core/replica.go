package core

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/core/epoch"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/transport"
)

// ReplicaRole is a Replica's current role.
type ReplicaRole int

const (
	RoleNone   ReplicaRole = iota // neither master nor slave (after NewReplica, before a Become call)
	RoleMaster                    // serving slaves, accepting puts
	RoleSlave                     // following a master
)

// String returns "none", "master" or "slave".
func (r ReplicaRole) String() string {
	switch r {
	case RoleNone:
		return "none"
	case RoleMaster:
		return "master"
	case RoleSlave:
		return "slave"
	}
	return fmt.Sprintf("ReplicaRole(%d)", int(r))
}

// MarshalText encodes the role as its name (JSON status documents).
func (r ReplicaRole) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// ReplicaConfig configures a Replica: one store and one epoch file that
// change roles at runtime with the autoswitch protocol. Master and Slave
// carry the per-role settings; their Protocol, Epochs, BrokerID, Logger and
// Registerer are taken from the ReplicaConfig, and the Slave's MasterAddr
// from BecomeSlave.
type ReplicaConfig struct {
	Store      store.Store
	Transport  transport.Transport
	Epochs     *epoch.File
	BrokerID   int64
	Master     MasterConfig // ListenAddr, Role, SyncAcks, timeouts, SyncStateSetConfirmer, ...
	Slave      SlaveConfig  // intervals, SyncFromLastFile, AsyncLearner, ...
	Logger     hclog.Logger
	Registerer prometheus.Registerer
}

// ReplicaStatus is a snapshot of a Replica.
type ReplicaStatus struct {
	Role          ReplicaRole
	Epoch         int32 // last epoch of the epoch file (0: none)
	EpochEntries  int
	ConfirmOffset int64
	MaxOffset     int64
	Master        *MasterStatus // set while RoleMaster
	Slave         *SlaveStatus  // set while RoleSlave
}

// Replica is one node of an autoswitch group: a store and its epoch file,
// served as a Master or followed as a SlaveNode, switching at runtime
// (RocketMQ 5's changeToMaster / changeToSlave). It is safe for concurrent
// use; role changes are serialised.
type Replica struct {
	cfg ReplicaConfig
	log hclog.Logger
	cut prometheus.Counter // replicator_ha_truncated_bytes_total; nil without a Registerer

	mu         sync.Mutex // guards everything below; held across role changes
	closed     bool
	master     *Master
	slave      *SlaveNode
	masterAddr string

	hmu   sync.Mutex
	hooks []func()
}

// NewReplica returns a replica with no role.
func NewReplica(cfg ReplicaConfig) (*Replica, error) {
	if cfg.Store == nil || cfg.Transport == nil || cfg.Epochs == nil {
		return nil, fmt.Errorf("%w: replica needs a store, a transport and an epoch file", ErrInvalidConfig)
	}
	if cfg.Master.ListenAddr == "" {
		return nil, fmt.Errorf("%w: replica Master.ListenAddr is empty", ErrInvalidConfig)
	}
	log, cut, err := observe("replica", cfg.Logger, cfg.Registerer, newTruncatedCounter)
	if err != nil {
		return nil, err
	}
	return &Replica{cfg: cfg, log: log, cut: cut}, nil
}

// BecomeMaster makes the replica the master of epoch (0: the last epoch +
// 1). It refuses an epoch that is not newer than the epoch file's last
// (epoch.ErrNotNewer), except the current epoch of a replica that is
// already master (no change). It stops the slave client, cuts a partial
// record at the log's end (see cutPartialRecord), appends {epoch, max
// offset} to the epoch file and starts a Master with the autoswitch
// protocol on Master.ListenAddr. It returns the epoch now served.
func (r *Replica) BecomeMaster(ep int32) (int32, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, ErrClosed
	}
	last, hasLast := r.cfg.Epochs.Last()
	if r.master != nil && (ep == 0 || ep == last.Epoch) {
		return last.Epoch, nil
	}
	if ep == 0 {
		ep = last.Epoch + 1
	}
	if hasLast && ep <= last.Epoch {
		return 0, fmt.Errorf("replicator: become master of epoch %d: the last epoch is %d: %w", ep, last.Epoch, epoch.ErrNotNewer)
	}
	if r.slave != nil {
		if err := r.slave.Close(); err != nil {
			r.log.Warn("closing the slave client", "error", err)
		}
		r.slave, r.masterAddr = nil, ""
	}
	if r.master != nil {
		// A master's log ends at a record boundary: nothing to cut.
		r.master.Fence(fmt.Errorf("%w: epoch %d replaced by %d", ErrFenced, last.Epoch, ep))
		r.master.Close()
		r.master = nil
	} else if err := r.cutPartialRecord(); err != nil {
		return 0, fmt.Errorf("replicator: become master of epoch %d: %w", ep, err)
	}
	b := r.cfg.Store.Bounds()
	// Entries past the log's end (a crash between a learned epoch entry and
	// its first body) cover nothing.
	if err := r.cfg.Epochs.TruncateSuffixByOffset(b.Max + 1); err != nil {
		return 0, fmt.Errorf("replicator: become master: %w", err)
	}
	start := b.Max
	if r.cfg.Epochs.Len() == 0 {
		// The first epoch of a log that already holds data (a classic
		// node switching to autoswitch) covers all of it: the master
		// vouches for its own log. RocketMQ starts it at the max offset,
		// which leaves the older bytes outside every epoch.
		start = b.Min
	}
	if err := r.cfg.Epochs.Append(ep, start); err != nil {
		return 0, fmt.Errorf("replicator: become master of epoch %d: %w", ep, err)
	}
	mc := r.cfg.Master
	mc.Protocol, mc.Epochs, mc.BrokerID, mc.Logger, mc.Registerer = r.roleConfig()
	m, err := NewMaster(r.cfg.Store, r.cfg.Transport, mc)
	if err != nil {
		return 0, err
	}
	if err := m.Start(); err != nil {
		return 0, err
	}
	r.master = m
	r.log.Info("became master", "epoch", ep, "epoch_start", start, "max_offset", b.Max, "addr", m.Addr())
	return ep, nil
}

// roleConfig is what the replica sets in the configuration of each role it
// takes (Master, SlaveNode): the autoswitch protocol, its epoch file, broker
// id, logger and registerer.
func (r *Replica) roleConfig() (Protocol, *epoch.File, int64, hclog.Logger, prometheus.Registerer) {
	return ProtocolAutoSwitch, r.cfg.Epochs, r.cfg.BrokerID, r.cfg.Logger, r.cfg.Registerer
}

// cutPartialRecord cuts the record the log ends inside of, if any: a
// slave's log ends there when its master died (or was cut off) while
// sending it, since frames split records. A master appends only at a
// record boundary (a store whose log ends inside a record refuses
// Append), so without the cut a promoted slave could not take a single
// put. The cut bytes never covered a PUT_OK: a sync put waits for acks
// past the end of its record. It scans the records of the last segment
// (records never cross a segment end) with the slave client stopped.
// The cut is logged at WARN and counted in
// replicator_ha_truncated_bytes_total.
func (r *Replica) cutPartialRecord() error {
	st := r.cfg.Store
	b := st.Bounds()
	off, _, err := store.ScanRecords(st, max(b.Min, b.LastSegmentStart), b.Max)
	if err != nil {
		return fmt.Errorf("scanning the log's last segment for a partial record at %d: %w", off, err)
	}
	if off >= b.Max {
		return nil
	}
	if err := st.Truncate(off); err != nil {
		return fmt.Errorf("cutting the partial record at %d (max offset %d): %w", off, b.Max, err)
	}
	n := b.Max - off
	r.log.Warn("cut the partial record the log ended inside of before becoming master (its master was sending it when the link or the master went)",
		"from", b.Max, "to", off, "bytes", n)
	if r.cut != nil {
		r.cut.Add(float64(n))
	}
	return nil
}

// BecomeSlave makes the replica a slave of masterAddr: a master is fenced
// first (new puts refused with ErrFenced at once, waiting sync puts failed
// with ErrFenced) and closed; then a SlaveNode with the autoswitch protocol
// handshakes with masterAddr, truncates to the consistent point and
// replicates. Already a slave of masterAddr: no change.
func (r *Replica) BecomeSlave(masterAddr string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if masterAddr == "" {
		return fmt.Errorf("%w: empty master address", ErrInvalidConfig)
	}
	if r.slave != nil && r.masterAddr == masterAddr {
		r.slave.Rearm() // named again: retry now if the connection is down
		return nil
	}
	if r.master != nil {
		r.master.Fence(fmt.Errorf("%w: becoming a slave of %s", ErrNotMaster, masterAddr))
		if err := r.master.Close(); err != nil {
			r.log.Warn("closing the master", "error", err)
		}
		r.master = nil
	}
	if r.slave != nil {
		if err := r.slave.Close(); err != nil {
			r.log.Warn("closing the slave client", "error", err)
		}
		r.slave, r.masterAddr = nil, ""
	}
	sc := r.cfg.Slave
	sc.MasterAddr = masterAddr
	sc.Protocol, sc.Epochs, sc.BrokerID, sc.Logger, sc.Registerer = r.roleConfig()
	s, err := NewSlave(r.cfg.Store, r.cfg.Transport, sc)
	if err != nil {
		return err
	}
	s.OnConnect(r.fireConnect)
	if err := s.Start(); err != nil {
		return err
	}
	r.slave, r.masterAddr = s, masterAddr
	r.log.Info("became slave", "master", masterAddr)
	return nil
}

// Put stores msg on a master (Master.Put); otherwise it fails with
// ErrNotMaster (a slave's error also matches ErrSlaveWriteProtected), or
// ErrClosed once closed.
func (r *Replica) Put(ctx context.Context, msg *record.Message) (PutResult, error) {
	msgs := [1]*record.Message{msg}
	var out [1]BatchPut
	r.putBatch(ctx, msgs[:], out[:])
	return out[0].PutResult, out[0].Err
}

// PutBatch stores msgs on a master (Master.PutBatch: one append run and
// one replica wait for the batch; out[i] is what Put would have returned
// for msgs[i] alone). Otherwise every message fails as Put does: ErrClosed
// once closed, ErrNotMaster (wrapping ErrSlaveWriteProtected on a slave).
func (r *Replica) PutBatch(ctx context.Context, msgs []*record.Message) []BatchPut {
	out := make([]BatchPut, len(msgs))
	r.putBatch(ctx, msgs, out)
	return out
}

// putBatch is PutBatch into out (len(msgs)), the code of Put too.
func (r *Replica) putBatch(ctx context.Context, msgs []*record.Message, out []BatchPut) {
	r.mu.Lock()
	m, slave, closed := r.master, r.slave != nil, r.closed
	r.mu.Unlock()
	var err error
	switch {
	case closed:
		err = ErrClosed
	case m != nil:
		m.putBatch(ctx, msgs, out)
		return
	case slave:
		err = fmt.Errorf("%w: %w", ErrNotMaster, ErrSlaveWriteProtected)
	default:
		err = ErrNotMaster
	}
	for i := range out {
		out[i].Err = err
	}
}

// Fence fences the master (see Master.Fence); no-op on a slave.
func (r *Replica) Fence(reason error) {
	r.mu.Lock()
	m := r.master
	r.mu.Unlock()
	if m != nil {
		m.Fence(reason)
	}
}

// Role returns the current role.
func (r *Replica) Role() ReplicaRole {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.master != nil:
		return RoleMaster
	case r.slave != nil:
		return RoleSlave
	}
	return RoleNone
}

// Status reports the role, the epoch file and the running master or slave.
func (r *Replica) Status() ReplicaStatus {
	r.mu.Lock()
	m, s := r.master, r.slave
	r.mu.Unlock()
	last, _ := r.cfg.Epochs.Last()
	st := ReplicaStatus{Epoch: last.Epoch, EpochEntries: r.cfg.Epochs.Len(), MaxOffset: r.cfg.Store.Bounds().Max}
	switch {
	case m != nil:
		ms := m.Status()
		st.Role = RoleMaster
		st.Master = &ms
		st.ConfirmOffset = ms.ConfirmOffset
	case s != nil:
		ss := s.Status()
		st.Role = RoleSlave
		st.Slave = &ss
		st.ConfirmOffset = ss.ConfirmOffset
	}
	return st
}

// ConfirmOffset is a master's computed confirm offset, a slave's
// min(master's confirm offset, local max offset), and 0 without a role.
func (r *Replica) ConfirmOffset() int64 {
	r.mu.Lock()
	m, s := r.master, r.slave
	r.mu.Unlock()
	switch {
	case m != nil:
		return m.ConfirmOffset()
	case s != nil:
		return s.ConfirmOffset()
	}
	return 0
}

// OnConnect registers f, called (on the slave's goroutine, keep it short)
// each time the slave's HA connection reaches TRANSFER, under any master.
func (r *Replica) OnConnect(f func()) {
	r.hmu.Lock()
	r.hooks = append(r.hooks, f)
	r.hmu.Unlock()
}

func (r *Replica) fireConnect() {
	r.hmu.Lock()
	hooks := r.hooks
	r.hmu.Unlock()
	for _, f := range hooks {
		f()
	}
}

// Master returns the running master, nil unless RoleMaster.
func (r *Replica) Master() *Master {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.master
}

// Slave returns the running slave client, nil unless RoleSlave.
func (r *Replica) Slave() *SlaveNode {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.slave
}

// Close stops the master or the slave. Idempotent. It does not close the
// store or the epoch file.
func (r *Replica) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	var err error
	if r.master != nil {
		err = r.master.Close()
		r.master = nil
	}
	if r.slave != nil {
		err = errors.Join(err, r.slave.Close())
		r.slave = nil
	}
	return err
}
