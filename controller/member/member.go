package member

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/replicatorhq/replicator/controller"
	"github.com/replicatorhq/replicator/controller/etcdstore"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/sdk/record"
)

// Errors of the package; check with errors.Is.
var (
	// ErrLeaseExpired: the member's registration lease is not valid by
	// its local deadline (not renewed within Config.FenceAfter, lost, or
	// not registered yet). Put errors with it also match core.ErrFenced.
	ErrLeaseExpired = errors.New("member: registration lease not valid")
	// ErrConfig: an invalid Config.
	ErrConfig = errors.New("member: invalid configuration")
)

// Defaults of Config.
const (
	DefaultLeaseTTL = etcdstore.DefaultTTL
	// DefaultFenceFraction: FenceAfter is LeaseTTL / DefaultFenceFraction.
	DefaultFenceFraction = 2
	// DefaultRenewFraction: RenewInterval is LeaseTTL / DefaultRenewFraction.
	DefaultRenewFraction = 6
	// DefaultHeartbeatFraction: HeartbeatInterval is LeaseTTL / DefaultHeartbeatFraction.
	DefaultHeartbeatFraction = 3
)

// Config configures a Member.
type Config struct {
	// Replica configures the core.Replica the member runs. The member
	// sets its BrokerID and its Master.SyncStateSetConfirmer (the
	// controller's, through Store); Master.ListenAddr must name a fixed
	// port: it is the HA address the other members follow.
	Replica core.ReplicaConfig
	// Store is the controller store (required). Its Client renews the
	// lease; its ElectionDelay matters when Supervise is set.
	Store *etcdstore.Store
	// Group and BrokerID name the member (required; BrokerID >= 0).
	Group    string
	BrokerID int64
	// HAAddr is the HA address registered for the slaves to follow
	// (default: Replica.Master.ListenAddr). APIAddr is the member's API
	// address, registered for clients that look the master up ("" when
	// it has none).
	HAAddr, APIAddr string
	// LeaseTTL is the registration's lease TTL (DefaultLeaseTTL; etcd
	// counts whole seconds and may raise it to its minimum).
	LeaseTTL time.Duration
	// FenceAfter is how long after the send time of its last successful
	// renewal a master keeps accepting puts (LeaseTTL / 2). It must be
	// below LeaseTTL: the controller elects no earlier than LeaseTTL
	// (plus its election delay) after etcd's last renewal.
	FenceAfter time.Duration
	// RenewInterval is the pause between lease renewals (LeaseTTL / 6).
	RenewInterval time.Duration
	// HeartbeatInterval is the pause between reports of the epoch and
	// max offset (LeaseTTL / 3).
	HeartbeatInterval time.Duration
	// Supervise also runs Store.Supervise for the group (elections on
	// lease expiry), for groups without a controller process. Any
	// number of supervisors may run.
	Supervise bool
	// Now is the clock of the lease deadline (time.Now). Tests inject
	// one; it must be monotonic.
	Now func() time.Time
	// OnRoleChange, when set, is called after each role change the
	// member makes (the replica has switched: a new master epoch served,
	// or a new master followed), on the Run goroutine, before the member
	// applies the next group state: a daemon updates what depends on the
	// role (its API's write protection, extensions) there. Keep it short:
	// the member renews no lease while it runs (the keeper does).
	OnRoleChange func(RoleChange)
	// Logger (hclog.NewNullLogger() when nil) and Registerer (no metrics
	// when nil).
	Logger     hclog.Logger
	Registerer prometheus.Registerer
}

// RoleChange is a role change the member made (Config.OnRoleChange).
type RoleChange struct {
	// Role is core.RoleMaster or core.RoleSlave.
	Role core.ReplicaRole
	// Epoch is the master epoch: served (master) or followed (slave).
	Epoch int32
	// Master is the master's broker id; MasterHA and MasterAPI its
	// registered addresses (a slave's master; "" when unknown).
	Master              int64
	MasterHA, MasterAPI string
}

// Status is a snapshot of a member.
type Status struct {
	Group    string
	BrokerID int64
	// Role and Epoch are the replica's (Epoch: its epoch file's last).
	Role  core.ReplicaRole
	Epoch int32
	// Master is the group's master (controller.NoMaster: none), elected
	// at MasterEpoch; MasterAPI and MasterHA are its registered
	// addresses ("" when unknown).
	Master              int64
	MasterEpoch         int32
	MasterAPI, MasterHA string
	// InSyncSet is the confirmed in-sync set (the controller's) at
	// InSyncSetEpoch.
	InSyncSet      []int64
	InSyncSetEpoch int32
	// NoMasterReason says why the group has no master.
	NoMasterReason string
	// Registered is true while the member holds a registration;
	// LeaseValid while its lease is valid by the local deadline.
	Registered, LeaseValid bool
	// Fenced is the fence reason of the replica's master ("" when not
	// fenced or not master).
	Fenced        string
	ConfirmOffset int64
	MaxOffset     int64
}

// Member makes a core.Replica a member of a controller-mode group.
type Member struct {
	cfg   Config
	rep   *core.Replica
	store *etcdstore.Store
	cli   *clientv3.Client
	log   hclog.Logger
	met   *metrics
	g     *guard
	// putBatch is the replica's PutBatch (a test hook).
	putBatch func(context.Context, []*record.Message) []core.BatchPut

	running sync.Mutex // one Run at a time

	mu         sync.Mutex // guards below
	group      controller.Group
	nodes      map[int64]controller.Node
	registered bool
	maxEpoch   int32 // highest master epoch applied

	notified RoleChange // the last role change reported (Run goroutine only)
}

// New checks cfg and creates the member's replica (no role yet: Run
// assigns it).
func New(cfg Config) (*Member, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: no store", ErrConfig)
	}
	if err := etcdstore.ValidGroup(cfg.Group); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.BrokerID < 0 {
		return nil, fmt.Errorf("%w: broker id %d", ErrConfig, cfg.BrokerID)
	}
	if cfg.HAAddr == "" {
		cfg.HAAddr = cfg.Replica.Master.ListenAddr
	}
	if _, port, err := net.SplitHostPort(cfg.HAAddr); err != nil || port == "0" || port == "" {
		return nil, fmt.Errorf("%w: HA address %q: want host:port with a fixed port", ErrConfig, cfg.HAAddr)
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.FenceAfter <= 0 {
		cfg.FenceAfter = cfg.LeaseTTL / DefaultFenceFraction
	}
	if cfg.FenceAfter >= cfg.LeaseTTL {
		return nil, fmt.Errorf("%w: FenceAfter %v is not below the lease TTL %v", ErrConfig, cfg.FenceAfter, cfg.LeaseTTL)
	}
	if cfg.RenewInterval <= 0 {
		cfg.RenewInterval = cfg.LeaseTTL / DefaultRenewFraction
	}
	if cfg.RenewInterval >= cfg.FenceAfter {
		return nil, fmt.Errorf("%w: RenewInterval %v is not below FenceAfter %v", ErrConfig, cfg.RenewInterval, cfg.FenceAfter)
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = cfg.LeaseTTL / DefaultHeartbeatFraction
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	met, err := newMetrics(cfg.Registerer, cfg.Group, cfg.BrokerID)
	if err != nil {
		return nil, err
	}
	m := &Member{cfg: cfg, store: cfg.Store, cli: cfg.Store.Client(), met: met,
		log: cfg.Logger.Named("member").With("group", cfg.Group, "broker_id", cfg.BrokerID),
		g:   newGuard(cfg.Now, cfg.FenceAfter), nodes: map[int64]controller.Node{},
		group: controller.NewState().Group}
	rc := cfg.Replica
	rc.BrokerID = cfg.BrokerID
	rc.Master.SyncStateSetConfirmer = &confirmer{inner: cfg.Store.Confirmer(cfg.Group, cfg.BrokerID), g: m.g,
		pause: cfg.RenewInterval, log: m.log}
	if rc.Logger == nil {
		rc.Logger = cfg.Logger
	}
	if rc.Registerer == nil {
		rc.Registerer = cfg.Registerer
	}
	rep, err := core.NewReplica(rc)
	if err != nil {
		return nil, fmt.Errorf("member: %w", err)
	}
	m.rep = rep
	m.putBatch = rep.PutBatch
	return m, nil
}

// confirmer proposes in-sync set changes only while the lease is valid,
// and retries a proposal whose outcome is unknown. An etcd error (a
// timeout, a broken connection) may come after the transaction committed:
// answering it to the master would keep its old set while etcd holds the
// new one, and an expansion then lets the controller elect a member the
// master's sync puts did not wait for. While a proposal is in flight the
// master waits for both sets, so retrying until the controller answers
// (an unchanged set answers the current one) or the lease ends (the
// master is fenced then: its set is frozen) is safe.
type confirmer struct {
	inner core.SyncStateSetConfirmer
	g     *guard
	pause time.Duration
	log   hclog.Logger
}

// definitive reports whether err is the controller's answer (or a
// request it can never accept) rather than an unknown outcome.
func definitive(err error) bool {
	for _, e := range []error{controller.ErrNotMaster, controller.ErrStaleMasterEpoch, controller.ErrStaleSetEpoch,
		controller.ErrSetWithoutMaster, controller.ErrSetUnchanged, controller.ErrUnknownBroker, controller.ErrBrokerNotAlive,
		controller.ErrBadBrokerID, controller.ErrCorrupt, controller.ErrNoEligible, etcdstore.ErrBadGroup,
		etcdstore.ErrTooManyNodes, etcdstore.ErrContention} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (c *confirmer) Propose(ctx context.Context, epoch int32, set []int64) ([]int64, error) {
	for attempt := 1; ; attempt++ {
		if !c.g.valid() {
			return nil, fmt.Errorf("propose in-sync set %v: %w", set, ErrLeaseExpired)
		}
		got, err := c.inner.Propose(ctx, epoch, set)
		if err == nil || definitive(err) || ctx.Err() != nil {
			return got, err
		}
		c.log.Warn("in-sync set proposal outcome unknown: proposing again", "set", set, "epoch", epoch, "attempt", attempt, "error", err)
		t := time.NewTimer(c.pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("propose in-sync set %v: %w", set, ctx.Err())
		case <-t.C:
		}
	}
}

// Replica is the member's replica (status, reads; puts go through
// Member.Put).
func (m *Member) Replica() *core.Replica { return m.rep }

// Close closes the replica (not its store or epoch file). Call it after
// Run returned.
func (m *Member) Close() error { return m.rep.Close() }

// Put stores msg on the master. It refuses at once when the lease is not
// valid by the local deadline, and answers an error along with the
// result when the deadline passed while the put ran (the process was
// paused or etcd unreachable: another node may be master by now, and the
// message, stored here, may be cut). Both errors match ErrLeaseExpired and
// core.ErrFenced; the refused put's result is zero. On a slave it fails as core.Replica.Put does
// (core.ErrNotMaster).
func (m *Member) Put(ctx context.Context, msg *record.Message) (core.PutResult, error) {
	out := m.PutBatch(ctx, []*record.Message{msg})
	return out[0].PutResult, out[0].Err
}

// PutBatch stores msgs on the master as one batch (core.Replica.PutBatch:
// one replica wait for them all), under Put's lease rules for the batch:
// when the lease is not valid by the local deadline, every message is
// refused (not stored) with Put's error; when the deadline passed while
// the batch ran, every message answered without an error (stored here,
// may be cut) gets Put's error along with its result, and the others keep
// their own error. out[i] answers msgs[i]; the refusals count per message.
func (m *Member) PutBatch(ctx context.Context, msgs []*record.Message) []core.BatchPut {
	if m.rep.Role() == core.RoleMaster && !m.g.valid() {
		out := make([]core.BatchPut, len(msgs))
		err := fmt.Errorf("%w: %w: put refused", core.ErrFenced, ErrLeaseExpired)
		for i := range out {
			out[i].Err = err
		}
		m.met.refused.WithLabelValues("before").Add(float64(len(msgs)))
		return out
	}
	out := m.putBatch(ctx, msgs)
	if m.g.valid() {
		return out
	}
	during := 0
	for i := range out {
		if out[i].Err != nil {
			continue
		}
		// The result goes with the error: the message is stored here and
		// may be cut (NextOffset > 0 tells a caller it may be stored).
		out[i].Err = fmt.Errorf("%w: %w: the deadline passed while the put at offset %d ran; it may not survive a failover",
			core.ErrFenced, ErrLeaseExpired, out[i].Offset)
		during++
	}
	if during > 0 {
		m.met.refused.WithLabelValues("during").Add(float64(during))
	}
	return out
}

// Status reports the member's view of its group and its replica.
func (m *Member) Status() Status {
	rs := m.rep.Status()
	m.mu.Lock()
	defer m.mu.Unlock()
	st := Status{Group: m.cfg.Group, BrokerID: m.cfg.BrokerID, Role: rs.Role, Epoch: rs.Epoch,
		Master: m.group.Master, MasterEpoch: m.group.MasterEpoch,
		InSyncSet: slices.Clone(m.group.SyncStateSet), InSyncSetEpoch: m.group.SyncStateSetEpoch,
		NoMasterReason: m.group.NoMasterReason, Registered: m.registered, LeaseValid: m.g.valid(),
		ConfirmOffset: rs.ConfirmOffset, MaxOffset: rs.MaxOffset}
	if n, ok := m.nodes[m.group.Master]; ok {
		st.MasterAPI, st.MasterHA = n.APIAddr, n.HAAddr
	}
	if rs.Master != nil {
		st.Fenced = rs.Master.Fenced
	}
	return st
}

// fence fences the replica's master (no-op on a slave) and records it.
func (m *Member) fence(reason error) {
	rs := m.rep.Status()
	if rs.Role != core.RoleMaster || rs.Master == nil || rs.Master.Fenced != "" {
		return
	}
	m.rep.Fence(reason)
	m.met.fenced.Set(1)
	m.log.Warn("fenced the master", "reason", reason)
}

// Run registers the member, keeps its lease and reports, and applies the
// group's state to the replica until ctx ends: the master of epoch E
// named in the state is served with BecomeMaster(E), another master is
// followed with BecomeSlave. A master whose lease is not renewed within
// FenceAfter, or lost, is fenced at once and registers again once etcd
// answers. When ctx ends Run fences a master, revokes the lease (the
// group elects another master at once) and returns nil.
func (m *Member) Run(ctx context.Context) error {
	if !m.running.TryLock() {
		return fmt.Errorf("%w: Run already running", ErrConfig)
	}
	defer m.running.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	s := &session{m: m}
	defer func() {
		s.end(true)
		cancel()
		wg.Wait()
	}()
	if m.cfg.Supervise {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.store.Supervise(ctx, m.cfg.Group, nil); err != nil {
				m.log.Error("supervise", "error", err)
			}
		}()
	}
	updates, err := m.store.Watch(ctx, m.cfg.Group)
	if err != nil {
		return fmt.Errorf("member: watch %s: %w", m.cfg.Group, err)
	}
	if s.start(ctx) {
		m.reapply(ctx, s)
	}
	tick := time.NewTicker(m.cfg.HeartbeatInterval)
	defer tick.Stop()
	for {
		var lost <-chan struct{}
		if s.reg != nil {
			lost = s.reg.Lost()
		}
		select {
		case <-ctx.Done():
			m.fence(fmt.Errorf("%w: member stopped", core.ErrFenced))
			return nil
		case u, ok := <-updates:
			if !ok {
				m.fence(fmt.Errorf("%w: member stopped", core.ErrFenced))
				return nil
			}
			if u.Err != nil {
				continue
			}
			m.apply(ctx, s, u.Group, u.Exists)
		case <-lost:
			m.met.lost.Inc()
			m.fence(fmt.Errorf("%w: %w: etcd ended the registration", core.ErrFenced, ErrLeaseExpired))
			s.end(false)
		case reason := <-s.expired:
			m.met.lost.Inc()
			m.log.Warn("lease not valid: registering again", "reason", reason)
			s.end(false)
		case <-tick.C:
			if s.reg == nil {
				if s.start(ctx) {
					m.reapply(ctx, s)
				}
				continue
			}
			s.heartbeat(ctx)
		}
	}
}

// session is one registration and its lease keeper.
type session struct {
	m       *Member
	reg     *etcdstore.Registration
	k       *keeper
	cancel  context.CancelFunc
	done    chan struct{}
	expired chan error // this session's keeper expiry (buffered 1; nil without a session)
}

// start registers (one attempt) and starts the keeper.
func (s *session) start(ctx context.Context) bool {
	m := s.m
	rs := m.rep.Status()
	node := controller.Node{BrokerID: m.cfg.BrokerID, HAAddr: m.cfg.HAAddr, APIAddr: m.cfg.APIAddr, Epoch: rs.Epoch, MaxOffset: rs.MaxOffset}
	rctx, cancel := context.WithTimeout(ctx, m.cfg.LeaseTTL)
	defer cancel()
	sent := m.cfg.Now()
	reg, d, err := m.store.Register(rctx, m.cfg.Group, node, m.cfg.LeaseTTL)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("registration failed; retrying", "error", err, "retry_in", m.cfg.HeartbeatInterval)
		}
		return false
	}
	m.g.renewed(sent)
	kctx, kcancel := context.WithCancel(ctx)
	exp := make(chan error, 1)
	lease := clientv3.LeaseID(reg.LeaseID())
	k := &keeper{g: m.g, interval: m.cfg.RenewInterval,
		renew: func(ctx context.Context) error {
			_, err := m.cli.KeepAliveOnce(ctx, lease)
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				return fmt.Errorf("%w: %w", errLeaseGone, err)
			}
			return err
		},
		expired: func(reason error) {
			// At once, from the timer: the run loop may be busy.
			m.fence(fmt.Errorf("%w: %w", core.ErrFenced, reason))
			select {
			case exp <- reason:
			default:
			}
		},
		failed: func(err error) {
			m.met.renewFailures.Inc()
			m.log.Debug("lease renewal failed", "error", err)
		}}
	s.reg, s.k, s.cancel, s.done, s.expired = reg, k, kcancel, make(chan struct{}), exp
	go func() {
		defer close(s.done)
		k.run(kctx)
	}()
	m.mu.Lock()
	m.registered = true
	m.mu.Unlock()
	m.met.registered.Set(1)
	m.log.Info("registered", "lease", fmt.Sprintf("%x", reg.LeaseID()), "epoch", node.Epoch, "max_offset", node.MaxOffset,
		"decision", d.Outcome.String())
	return true
}

// end stops the keeper and closes the registration (revoking the lease
// when etcd answers: the group then elects at once).
func (s *session) end(final bool) {
	m := s.m
	if s.reg == nil {
		return
	}
	s.k.stop()
	s.cancel()
	<-s.done
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.FenceAfter)
	if err := s.reg.Close(ctx); err != nil {
		m.log.Debug("closing the registration", "error", err)
	}
	cancel()
	s.reg, s.expired = nil, nil
	m.g.invalidate()
	m.mu.Lock()
	m.registered = false
	m.mu.Unlock()
	m.met.registered.Set(0)
	if !final {
		m.log.Warn("registration ended; registering again when etcd answers")
	}
}

// heartbeat reports the replica's epoch and max offset.
func (s *session) heartbeat(ctx context.Context) {
	m := s.m
	rs := m.rep.Status()
	hctx, cancel := context.WithTimeout(ctx, m.cfg.HeartbeatInterval)
	defer cancel()
	d, err := s.reg.Update(hctx, rs.Epoch, rs.MaxOffset)
	switch {
	case errors.Is(err, etcdstore.ErrLeaseLost):
		m.met.lost.Inc()
		m.fence(fmt.Errorf("%w: %w: %w", core.ErrFenced, ErrLeaseExpired, err))
		s.end(false)
	case err != nil:
		m.met.heartbeatFailures.Inc()
		m.log.Debug("heartbeat failed", "error", err)
	case d.Changed:
		m.log.Debug("heartbeat changed the group", "outcome", d.Outcome.String(), "master", d.Master, "epoch", d.MasterEpoch)
	}
}

// reapply reads the group again and applies it (after a registration).
func (m *Member) reapply(ctx context.Context, s *session) {
	lctx, cancel := context.WithTimeout(ctx, m.cfg.LeaseTTL)
	defer cancel()
	snap, err := m.store.Load(lctx, m.cfg.Group)
	if err != nil {
		m.log.Debug("reading the group", "error", err)
		return
	}
	m.applyState(ctx, s, snap.State)
}

// apply acts on a new value of the group key: it reads the group's
// registrations (the master's addresses) along with it.
func (m *Member) apply(ctx context.Context, s *session, g controller.Group, exists bool) {
	lctx, cancel := context.WithTimeout(ctx, m.cfg.LeaseTTL)
	defer cancel()
	snap, err := m.store.Load(lctx, m.cfg.Group)
	st := snap.State
	if err != nil || (exists && snap.Revision == 0) {
		st = controller.NewState()
		st.Group = g.Normalize()
		m.mu.Lock()
		st.Nodes = m.nodes
		m.mu.Unlock()
	}
	m.applyState(ctx, s, st)
}

// applyState makes the replica what st says.
func (m *Member) applyState(ctx context.Context, s *session, st controller.State) {
	g := st.Group.Normalize()
	m.mu.Lock()
	if g.MasterEpoch < m.maxEpoch {
		m.mu.Unlock()
		return // an older state than one applied
	}
	prev := m.group
	m.group, m.nodes, m.maxEpoch = g.Clone(), st.Nodes, g.MasterEpoch
	m.mu.Unlock()
	if !prev.Equal(g) {
		m.log.Info("group state", "master", g.Master, "epoch", g.MasterEpoch, "in_sync_set", g.SyncStateSet,
			"set_epoch", g.SyncStateSetEpoch, "no_master_reason", g.NoMasterReason)
	}
	before := m.rep.Role()
	switch {
	case g.Master == controller.NoMaster:
		m.fence(fmt.Errorf("%w: the group has no master", core.ErrFenced))
	case g.Master == m.cfg.BrokerID:
		m.serve(ctx, s, g.MasterEpoch)
	default:
		n, ok := st.Nodes[g.Master]
		if !ok || !n.Alive || n.HAAddr == "" {
			m.log.Warn("the master has no live registration: waiting", "master", g.Master, "epoch", g.MasterEpoch)
			m.fence(fmt.Errorf("%w: master %d elected at epoch %d", core.ErrFenced, g.Master, g.MasterEpoch))
			break
		}
		if err := m.rep.BecomeSlave(n.HAAddr); err != nil {
			m.log.Error("becoming a slave", "master", g.Master, "master_ha", n.HAAddr, "error", err)
			break
		}
		m.met.fenced.Set(0)
		m.notify(RoleChange{Role: core.RoleSlave, Epoch: g.MasterEpoch, Master: g.Master, MasterHA: n.HAAddr, MasterAPI: n.APIAddr})
	}
	m.observe(before)
}

// serve makes the replica the master of epoch, or steps its demotion when
// it cannot serve that epoch unfenced (it fenced itself, or it restarted
// and its epoch file already holds the epoch): the controller elects
// again, and a new epoch follows.
func (m *Member) serve(ctx context.Context, s *session, ep int32) {
	rs := m.rep.Status()
	if rs.Role == core.RoleMaster && rs.Epoch == ep && rs.Master != nil && rs.Master.Fenced == "" {
		return
	}
	if ep > rs.Epoch && m.g.valid() {
		// BecomeMaster cuts a partial record at the log's end (the old
		// master died while sending it) before it appends the epoch.
		got, err := m.rep.BecomeMaster(ep)
		if err != nil {
			// It cannot serve the epoch (its HA address is taken, say):
			// hand the epoch back below, so that the controller elects
			// another member, or this one again on its next heartbeat,
			// instead of naming a master that serves nothing.
			m.log.Error("becoming master: handing the epoch back", "epoch", ep, "error", err)
			m.demote(ctx, s, ep, "could not become master")
			return
		}
		if !m.g.valid() {
			// The deadline passed while the role changed: the timer
			// fenced the previous master, not this one.
			m.fence(fmt.Errorf("%w: %w: became master after the deadline", core.ErrFenced, ErrLeaseExpired))
			return
		}
		m.met.fenced.Set(0)
		m.log.Info("serving as master", "epoch", got)
		m.notify(RoleChange{Role: core.RoleMaster, Epoch: got, Master: m.cfg.BrokerID, MasterHA: m.cfg.HAAddr, MasterAPI: m.cfg.APIAddr})
		return
	}
	m.demote(ctx, s, ep, "fenced or restarted")
}

// demote steps the demotion of this member as the master of epoch ep,
// which it cannot serve (why says so), so that the controller elects
// again. Without a registration or a valid lease it does nothing: it
// registers again first.
func (m *Member) demote(ctx context.Context, s *session, ep int32, why string) {
	if s.reg == nil || !m.g.valid() {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, m.cfg.LeaseTTL)
	defer cancel()
	d, err := m.store.Step(dctx, m.cfg.Group, controller.MasterDemoted{BrokerID: m.cfg.BrokerID, Epoch: ep})
	if err != nil {
		m.log.Warn("demoting a master that cannot serve its epoch", "epoch", ep, "why", why, "error", err)
		return
	}
	m.log.Warn("named master of an epoch it cannot serve: demoted itself", "epoch", ep, "why", why,
		"local_epoch", m.rep.Status().Epoch, "outcome", d.Outcome.String(), "new_master", d.Master, "new_epoch", d.MasterEpoch)
}

// notify reports rc to Config.OnRoleChange unless it was the last one
// reported (a slave that follows the same master at a newer epoch is no
// change for the daemon: it keeps its connection).
func (m *Member) notify(rc RoleChange) {
	last := m.notified
	if last.Role == rc.Role && last.Master == rc.Master && last.MasterHA == rc.MasterHA && last.MasterAPI == rc.MasterAPI &&
		(rc.Role == core.RoleSlave || last.Epoch == rc.Epoch) {
		return
	}
	m.notified = rc
	if m.cfg.OnRoleChange != nil {
		m.cfg.OnRoleChange(rc)
	}
}

// observe updates the metrics after a state change.
func (m *Member) observe(before core.ReplicaRole) {
	rs := m.rep.Status()
	m.met.role.Set(float64(rs.Role))
	m.met.epoch.Set(float64(rs.Epoch))
	if rs.Role != before {
		m.met.roleChanges.Inc()
		m.log.Info("role changed", "from", before.String(), "to", rs.Role.String(), "epoch", rs.Epoch)
	}
}
