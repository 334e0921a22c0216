package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/replicatorhq/replicator/controller"
)

// Defaults of Config.
const (
	DefaultPrefix      = "/replicator"
	DefaultMaxAttempts = 32
)

// Errors of the store; check with errors.Is.
var (
	// ErrBadGroup: a group name outside [A-Za-z0-9._-]{1,128}.
	ErrBadGroup = errors.New("etcdstore: invalid group name")
	// ErrContention: every attempt of a step lost the revision race.
	ErrContention = errors.New("etcdstore: too many concurrent writers")
	// ErrAlreadyRegistered: a live registration holds the broker id.
	ErrAlreadyRegistered = errors.New("etcdstore: broker id already registered")
	// ErrLeaseLost: the registration's lease ended (expired or revoked).
	ErrLeaseLost = errors.New("etcdstore: registration lease lost")
	// ErrTooManyNodes: a group holds more node keys than a state may.
	ErrTooManyNodes = errors.New("etcdstore: too many node registrations")
)

var groupName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// ValidGroup checks a group name: 1 to 128 of [A-Za-z0-9._-], not "." or
// "..".
func ValidGroup(name string) error {
	if !groupName.MatchString(name) || name == "." || name == ".." {
		return fmt.Errorf("%w: %q", ErrBadGroup, name)
	}
	return nil
}

// Config configures a Store.
type Config struct {
	// Client is the etcd client (required); the Store does not close it.
	Client *clientv3.Client
	// Prefix roots the key space (DefaultPrefix).
	Prefix string
	// Options are the state machine's (UncleanElection).
	Options controller.Options
	// MaxAttempts bounds the re-reads of a step that loses the revision
	// race (DefaultMaxAttempts).
	MaxAttempts int
	// ElectionDelay is how long Supervise waits after a registration
	// ends before it steps the expiry: a margin on top of the lease TTL
	// for a master whose clock or scheduling lags (0: step at once; the
	// controller command uses the default lease TTL).
	ElectionDelay time.Duration
	// Logger (hclog.NewNullLogger() when nil) and Registerer (no metrics
	// when nil).
	Logger     hclog.Logger
	Registerer prometheus.Registerer
}

// Store keeps groups' controller state in etcd. It is safe for concurrent
// use by any number of processes: every change is a transaction on the
// group key's mod revision.
type Store struct {
	cli    *clientv3.Client
	prefix string
	opt    controller.Options
	max    int
	delay  time.Duration
	log    hclog.Logger
	met    *metrics
}

// New returns a Store over cfg.Client.
func New(cfg Config) (*Store, error) {
	if cfg.Client == nil {
		return nil, errors.New("etcdstore: no etcd client")
	}
	s := &Store{cli: cfg.Client, prefix: strings.TrimRight(cfg.Prefix, "/"), opt: cfg.Options, max: cfg.MaxAttempts,
		delay: cfg.ElectionDelay, log: cfg.Logger}
	if cfg.Prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.max <= 0 {
		s.max = DefaultMaxAttempts
	}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	met, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s.met = met
	return s, nil
}

// Client is the etcd client the Store uses (package controller/member
// renews a registration's lease with it).
func (s *Store) Client() *clientv3.Client { return s.cli }

// GroupPrefix is the prefix of every key of group:
// <prefix>/groups/<group>/.
func (s *Store) GroupPrefix(group string) string { return s.prefix + "/groups/" + group + "/" }

// StateKey is the group key: <prefix>/groups/<group>/state.
func (s *Store) StateKey(group string) string { return s.GroupPrefix(group) + "state" }

// NodeKey is a broker's registration: <prefix>/groups/<group>/nodes/<id>.
func (s *Store) NodeKey(group string, id int64) string {
	return s.nodesPrefix(group) + strconv.FormatInt(id, 10)
}

func (s *Store) nodesPrefix(group string) string { return s.GroupPrefix(group) + "nodes/" }

// Snapshot is a group's state read at one etcd revision.
type Snapshot struct {
	State controller.State
	// Revision is the group key's mod revision (0: no key yet).
	Revision int64
	// NodeRevisions holds each live registration's create revision.
	NodeRevisions map[int64]int64
	// ReadRevision is the etcd revision the snapshot was read at.
	ReadRevision int64
}

// Load reads group's state: the group key and every registration, at one
// revision. Registered nodes are alive; the master and in-sync members
// without a registration appear as dead nodes. A malformed registration
// is logged and counted as absent; a malformed group key is an error
// (controller.ErrCorrupt).
func (s *Store) Load(ctx context.Context, group string) (Snapshot, error) {
	if err := ValidGroup(group); err != nil {
		return Snapshot{}, err
	}
	resp, err := s.cli.Get(ctx, s.GroupPrefix(group), clientv3.WithPrefix(), clientv3.WithLimit(controller.MaxSetSize+2))
	if err != nil {
		return Snapshot{}, fmt.Errorf("etcdstore: read group %s: %w", group, err)
	}
	if resp.More {
		return Snapshot{}, fmt.Errorf("%w: group %s has more than %d keys", ErrTooManyNodes, group, controller.MaxSetSize+1)
	}
	snap := Snapshot{State: controller.NewState(), NodeRevisions: map[int64]int64{}, ReadRevision: resp.Header.Revision}
	stateKey, nodes := s.StateKey(group), s.nodesPrefix(group)
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		switch {
		case key == stateKey:
			g, err := controller.DecodeGroup(kv.Value)
			if err != nil {
				return Snapshot{}, fmt.Errorf("etcdstore: group key %s: %w", key, err)
			}
			snap.State.Group, snap.Revision = g, kv.ModRevision
		case strings.HasPrefix(key, nodes):
			id, err := strconv.ParseInt(key[len(nodes):], 10, 64)
			n, derr := controller.DecodeNode(kv.Value)
			if err == nil && derr == nil && n.BrokerID != id {
				derr = fmt.Errorf("%w: registration of %d under key %d", controller.ErrCorrupt, n.BrokerID, id)
			}
			if err != nil || derr != nil {
				s.log.Warn("ignoring a malformed node registration", "group", group, "key", key, "error", errors.Join(err, derr))
				continue
			}
			n.Alive = true
			snap.State.Nodes[id] = n
			snap.NodeRevisions[id] = kv.CreateRevision
		}
	}
	g := snap.State.Group
	dead := append([]int64{g.Master}, g.SyncStateSet...)
	for _, id := range dead {
		if _, ok := snap.State.Nodes[id]; !ok && id != controller.NoMaster {
			snap.State.Nodes[id] = controller.Node{BrokerID: id}
		}
	}
	return snap, nil
}

// Step applies ev to group's state: it reads the state, steps the state
// machine and, when the group changed, writes it in a transaction that
// compares the group key's mod revision (and, for an election or an
// accepted set, that the chosen nodes' registrations are the ones read).
// A lost race reads and steps again, at most MaxAttempts times
// (ErrContention). The decision describes the state that was written, or
// the current one when nothing changed.
func (s *Store) Step(ctx context.Context, group string, ev controller.Event) (controller.Decision, error) {
	return s.step(ctx, group, func(controller.State) controller.Event { return ev })
}

// step is Step with the event built from each fresh read.
func (s *Store) step(ctx context.Context, group string, mk func(controller.State) controller.Event) (controller.Decision, error) {
	for attempt := 1; attempt <= s.max; attempt++ {
		snap, err := s.Load(ctx, group)
		if err != nil {
			return controller.Decision{}, err
		}
		ev := mk(snap.State)
		next, d := controller.Step(snap.State, ev, s.opt)
		if !d.Changed {
			s.logDecision(group, ev, d)
			return d, nil
		}
		val, err := controller.EncodeGroup(next.Group)
		if err != nil {
			return controller.Decision{}, fmt.Errorf("etcdstore: encode group %s: %w", group, err)
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.StateKey(group)), "=", snap.Revision)}
		var depends []int64
		switch d.Outcome {
		case controller.Elected:
			depends = []int64{d.Master}
		case controller.SetAccepted:
			depends = d.Set
		}
		for _, id := range depends {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.NodeKey(group, id)), "=", snap.NodeRevisions[id]))
		}
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(s.StateKey(group), string(val))).Commit()
		if err != nil {
			return controller.Decision{}, fmt.Errorf("etcdstore: write group %s: %w", group, err)
		}
		if resp.Succeeded {
			s.logDecision(group, ev, d)
			s.met.decided(d)
			return d, nil
		}
		s.met.conflicts.Inc()
		s.log.Debug("group changed meanwhile: reading it again", "group", group, "event", ev.String(), "read_revision", snap.Revision, "attempt", attempt)
	}
	return controller.Decision{}, fmt.Errorf("%w: group %s, %d attempts", ErrContention, group, s.max)
}

func (s *Store) logDecision(group string, ev controller.Event, d controller.Decision) {
	switch {
	case d.Outcome == controller.Elected && d.DataLoss:
		s.log.Error("unclean election: the new master was not in the in-sync set, acknowledged messages may be lost",
			"group", group, "master", d.Master, "epoch", d.MasterEpoch, "trigger", ev.String())
	case d.Outcome == controller.Elected:
		s.log.Info("elected a master", "group", group, "master", d.Master, "epoch", d.MasterEpoch, "set_epoch", d.SetEpoch, "trigger", ev.String())
	case d.Outcome == controller.NoMasterLeft && d.Changed:
		s.log.Error("group has no master", "group", group, "epoch", d.MasterEpoch, "in_sync_set", d.Set, "reason", d.Err)
	case d.Outcome == controller.SetAccepted:
		s.log.Info("in-sync set changed", "group", group, "master", d.Master, "epoch", d.MasterEpoch, "in_sync_set", d.Set, "set_epoch", d.SetEpoch)
	case d.Outcome == controller.Rejected:
		s.log.Warn("event refused", "group", group, "event", ev.String(), "reason", d.Err)
	}
}

// DeleteGroup removes every key of group (its state and registrations)
// and returns how many it deleted. Nodes still running keep their leases
// (now without keys) until they close them; the next registration or
// step starts the group anew (its first election exceeds every epoch the
// nodes report).
func (s *Store) DeleteGroup(ctx context.Context, group string) (int64, error) {
	if err := ValidGroup(group); err != nil {
		return 0, err
	}
	resp, err := s.cli.Delete(ctx, s.GroupPrefix(group), clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("etcdstore: delete group %s: %w", group, err)
	}
	s.log.Info("deleted group", "group", group, "keys", resp.Deleted)
	return resp.Deleted, nil
}

// Confirmer returns the in-sync set confirmer of the master brokerID of
// group: its Propose has the shape of core.SyncStateSetConfirmer.
func (s *Store) Confirmer(group string, brokerID int64) *Confirmer {
	return &Confirmer{s: s, group: group, id: brokerID}
}

// Confirmer proposes a master's in-sync set changes to the controller
// (RocketMQ's AlterSyncStateSet).
type Confirmer struct {
	s     *Store
	group string
	id    int64
}

// Propose asks for newSet as the in-sync set of the master of epoch and
// returns the set in effect once etcd has it. The proposal is based on
// the set epoch it reads: only the master of the current epoch may change
// the set, so no other writer can have moved it in between except by an
// election, which the master epoch check refuses. An unchanged set
// answers the current set.
func (c *Confirmer) Propose(ctx context.Context, epoch int32, newSet []int64) ([]int64, error) {
	d, err := c.s.step(ctx, c.group, func(st controller.State) controller.Event {
		return controller.AlterSyncStateSet{Master: c.id, MasterEpoch: epoch, SetEpoch: st.Group.SyncStateSetEpoch, Set: newSet}
	})
	if err != nil {
		return nil, err
	}
	switch {
	case d.Outcome == controller.SetAccepted:
		return d.Set, nil
	case errors.Is(d.Err, controller.ErrSetUnchanged):
		return d.Set, nil
	}
	return nil, fmt.Errorf("etcdstore: group %s: %w", c.group, d.Err)
}
