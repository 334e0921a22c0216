package controller

import (
	"cmp"
	"fmt"
	"slices"
)

// Options tune the state machine.
type Options struct {
	// UncleanElection lets an election pick an alive node outside the
	// in-sync set when no member is alive. Such a node may lack
	// acknowledged messages: the decision says so (DataLoss).
	UncleanElection bool
}

// Event is something that happened to a group; Step applies it.
type Event interface {
	event()
	String() string
}

// NodeRegistered: a broker registered (a new lease) with what it holds.
// A group without a master tries an election.
type NodeRegistered struct{ Node Node }

// LeaseExpired: a broker's registration ended. When it is the master's,
// a new master is elected; an unknown broker is nothing to act on (the
// same expiry seen twice, or a node that never mattered).
type LeaseExpired struct{ BrokerID int64 }

// MasterDemoted: the master of Epoch gave the role up (it could not renew
// its lease, or an operator demoted it). A new master is elected among
// the others.
type MasterDemoted struct {
	BrokerID int64
	Epoch    int32
}

// AlterSyncStateSet: the master proposes a new in-sync set (RocketMQ's
// AlterSyncStateSet), based on the set of SetEpoch.
type AlterSyncStateSet struct {
	Master      int64
	MasterEpoch int32
	SetEpoch    int32
	Set         []int64
}

// Heartbeat: a registered broker reports its last epoch and max offset.
// A group without a master tries an election.
type Heartbeat struct {
	BrokerID  int64
	Epoch     int32
	MaxOffset int64
}

func (NodeRegistered) event()    {}
func (LeaseExpired) event()      {}
func (MasterDemoted) event()     {}
func (AlterSyncStateSet) event() {}
func (Heartbeat) event()         {}

func (e NodeRegistered) String() string {
	return fmt.Sprintf("node %d registered (epoch %d, max offset %d)", e.Node.BrokerID, e.Node.Epoch, e.Node.MaxOffset)
}
func (e LeaseExpired) String() string { return fmt.Sprintf("lease of node %d expired", e.BrokerID) }
func (e MasterDemoted) String() string {
	return fmt.Sprintf("master %d demoted itself at epoch %d", e.BrokerID, e.Epoch)
}
func (e AlterSyncStateSet) String() string {
	return fmt.Sprintf("master %d at epoch %d proposes in-sync set %v over set epoch %d", e.Master, e.MasterEpoch, e.Set, e.SetEpoch)
}
func (e Heartbeat) String() string {
	return fmt.Sprintf("heartbeat of node %d (epoch %d, max offset %d)", e.BrokerID, e.Epoch, e.MaxOffset)
}

// Outcome is the kind of a Decision.
type Outcome int

const (
	// Noted: the event changed at most the nodes' information.
	Noted Outcome = iota
	// Elected: a new master was elected (Decision.Master at
	// Decision.MasterEpoch, in-sync set = {Master}).
	Elected
	// NoMasterLeft: the group has no master and none could be elected;
	// Decision.Err says why (ErrNoEligible).
	NoMasterLeft
	// SetAccepted: the proposed in-sync set took effect at
	// Decision.SetEpoch.
	SetAccepted
	// Rejected: the event was refused; Decision.Err says why.
	Rejected
)

func (o Outcome) String() string {
	switch o {
	case Noted:
		return "noted"
	case Elected:
		return "elected"
	case NoMasterLeft:
		return "no-master"
	case SetAccepted:
		return "set-accepted"
	case Rejected:
		return "rejected"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Decision is what a step decided. Its fields describe the group after
// the step.
type Decision struct {
	Outcome Outcome
	// Changed is true when the Group changed and must be persisted
	// (node information alone never sets it).
	Changed     bool
	Master      int64
	MasterEpoch int32
	Set         []int64
	SetEpoch    int32
	// DataLoss is true for an unclean election: the new master was not
	// in the in-sync set and may lack acknowledged messages.
	DataLoss bool
	// Err is the reason of a Rejected or NoMasterLeft outcome (wrapping
	// one of this package's errors), nil otherwise.
	Err error
}

// Step applies ev to s and returns the new state and the decision. It
// never modifies s (the result shares nothing with it), reads no clock and
// does no I/O: a store calls it, persists the Group when Changed, and steps
// again on a fresh state when its write loses a race.
func Step(s State, ev Event, opt Options) (State, Decision) {
	n := s.Clone()
	n.Group = n.Group.Normalize()
	before := n.Group.Clone()
	var d Decision
	switch e := ev.(type) {
	case NodeRegistered:
		d = n.register(e, opt)
	case LeaseExpired:
		d = n.expire(e, opt)
	case MasterDemoted:
		d = n.demote(e, opt)
	case AlterSyncStateSet:
		d = n.alter(e)
	case Heartbeat:
		d = n.heartbeat(e, opt)
	default:
		d = Decision{Outcome: Rejected, Err: fmt.Errorf("%w: unknown event %T", ErrCorrupt, ev)}
	}
	d.Changed = !before.Equal(n.Group)
	d.Master, d.MasterEpoch = n.Group.Master, n.Group.MasterEpoch
	d.Set, d.SetEpoch = slices.Clone(n.Group.SyncStateSet), n.Group.SyncStateSetEpoch
	return n, d
}

func (s *State) register(e NodeRegistered, opt Options) Decision {
	if err := e.Node.Validate(); err != nil {
		return Decision{Outcome: Rejected, Err: fmt.Errorf("register: %w", err)}
	}
	node := e.Node
	node.Alive = true
	s.Nodes[node.BrokerID] = node
	if s.Group.Master == NoMaster {
		return s.elect(NoMaster, opt, fmt.Sprintf("node %d registered", node.BrokerID))
	}
	return Decision{Outcome: Noted}
}

func (s *State) expire(e LeaseExpired, opt Options) Decision {
	node, ok := s.Nodes[e.BrokerID]
	if !ok {
		// Neither master nor member (a store keeps no registration
		// that ended): nothing depends on it.
		return Decision{Outcome: Noted}
	}
	node.Alive = false
	s.Nodes[e.BrokerID] = node
	if s.Group.Master == e.BrokerID {
		return s.elect(e.BrokerID, opt, fmt.Sprintf("lease of master %d expired", e.BrokerID))
	}
	return Decision{Outcome: Noted}
}

func (s *State) demote(e MasterDemoted, opt Options) Decision {
	if s.Group.Master != e.BrokerID {
		return Decision{Outcome: Rejected, Err: fmt.Errorf("demote of %d: %w (master is %d)", e.BrokerID, ErrNotMaster, s.Group.Master)}
	}
	if e.Epoch != s.Group.MasterEpoch {
		return Decision{Outcome: Rejected, Err: fmt.Errorf("demote of %d at epoch %d: %w (epoch is %d)", e.BrokerID, e.Epoch, ErrStaleMasterEpoch, s.Group.MasterEpoch)}
	}
	return s.elect(e.BrokerID, opt, fmt.Sprintf("master %d demoted itself", e.BrokerID))
}

func (s *State) heartbeat(e Heartbeat, opt Options) Decision {
	node, ok := s.Nodes[e.BrokerID]
	if !ok {
		return Decision{Outcome: Rejected, Err: fmt.Errorf("heartbeat: %w %d", ErrUnknownBroker, e.BrokerID)}
	}
	if e.Epoch < 0 || e.MaxOffset < 0 {
		return Decision{Outcome: Rejected, Err: fmt.Errorf("heartbeat of %d: %w: epoch %d, max offset %d", e.BrokerID, ErrCorrupt, e.Epoch, e.MaxOffset)}
	}
	node.Epoch, node.MaxOffset, node.Alive = e.Epoch, e.MaxOffset, true
	s.Nodes[e.BrokerID] = node
	if s.Group.Master == NoMaster {
		return s.elect(NoMaster, opt, fmt.Sprintf("heartbeat of node %d", e.BrokerID))
	}
	return Decision{Outcome: Noted}
}

func (s *State) alter(e AlterSyncStateSet) Decision {
	g := &s.Group
	reject := func(err error) Decision {
		return Decision{Outcome: Rejected, Err: fmt.Errorf("in-sync set %v from %d at epoch %d: %w", e.Set, e.Master, e.MasterEpoch, err)}
	}
	if g.Master == NoMaster || g.Master != e.Master {
		return reject(fmt.Errorf("%w (master is %d)", ErrNotMaster, g.Master))
	}
	if e.MasterEpoch != g.MasterEpoch {
		return reject(fmt.Errorf("%w (epoch is %d)", ErrStaleMasterEpoch, g.MasterEpoch))
	}
	if e.SetEpoch != g.SyncStateSetEpoch {
		return reject(fmt.Errorf("%w (proposal over %d, set epoch is %d)", ErrStaleSetEpoch, e.SetEpoch, g.SyncStateSetEpoch))
	}
	if len(e.Set) > MaxSetSize {
		return reject(fmt.Errorf("%w: %d members (max %d)", ErrCorrupt, len(e.Set), MaxSetSize))
	}
	set := slices.Clone(e.Set)
	slices.Sort(set)
	set = slices.Compact(set)
	if _, ok := slices.BinarySearch(set, g.Master); !ok {
		return reject(ErrSetWithoutMaster)
	}
	for _, id := range set {
		node, ok := s.Nodes[id]
		if !ok {
			return reject(fmt.Errorf("%w %d", ErrUnknownBroker, id))
		}
		if !node.Alive {
			return reject(fmt.Errorf("%w: %d", ErrBrokerNotAlive, id))
		}
	}
	if slices.Equal(set, g.SyncStateSet) {
		return reject(ErrSetUnchanged)
	}
	g.SyncStateSet = set
	g.SyncStateSetEpoch++
	return Decision{Outcome: SetAccepted}
}

// elect picks a new master after the loss of exclude (NoMaster when the
// group had none), records it, and returns the decision. why names the
// triggering event for the no-master reason.
func (s *State) elect(exclude int64, opt Options, why string) Decision {
	g := &s.Group
	first := g.MasterEpoch == 0 && len(g.SyncStateSet) == 0
	var cands []Node
	for _, n := range s.Nodes {
		if n.Alive && n.BrokerID != exclude && (first || g.InSet(n.BrokerID)) {
			cands = append(cands, n)
		}
	}
	unclean := false
	if len(cands) == 0 && opt.UncleanElection {
		for _, n := range s.Nodes {
			if n.Alive && n.BrokerID != exclude {
				cands = append(cands, n)
			}
		}
		unclean = len(cands) > 0
	}
	if len(cands) == 0 {
		wasMaster := g.Master != NoMaster
		reason := fmt.Sprintf("%s: no alive member of the in-sync set %v", why, g.SyncStateSet)
		if opt.UncleanElection {
			reason = fmt.Sprintf("%s: no alive node", why)
		}
		g.Master, g.Unclean = NoMaster, false
		if wasMaster || g.NoMasterReason == "" {
			g.NoMasterReason = reason
		}
		return Decision{Outcome: NoMasterLeft, Err: fmt.Errorf("%w: %s", ErrNoEligible, g.NoMasterReason)}
	}
	best := slices.MinFunc(cands, better)
	epoch := g.MasterEpoch
	for _, n := range s.Nodes {
		epoch = max(epoch, n.Epoch)
	}
	g.Master = best.BrokerID
	g.MasterEpoch = epoch + 1
	g.SyncStateSet = []int64{best.BrokerID}
	g.SyncStateSetEpoch++
	g.Unclean = unclean
	g.NoMasterReason = ""
	return Decision{Outcome: Elected, DataLoss: unclean}
}

// better orders candidates: highest reported epoch first, then highest
// max offset, then lowest broker id.
func better(a, b Node) int {
	if c := cmp.Compare(b.Epoch, a.Epoch); c != 0 {
		return c
	}
	if c := cmp.Compare(b.MaxOffset, a.MaxOffset); c != 0 {
		return c
	}
	return cmp.Compare(a.BrokerID, b.BrokerID)
}
