package controller

import (
	"errors"
	"slices"
	"testing"
)

// group builds a state with master m at epoch e, set ss at set epoch se,
// and the given nodes (all alive unless listed in dead).
func group(m int64, e int32, ss []int64, se int32, nodes []Node, dead ...int64) State {
	s := NewState()
	s.Group = Group{Master: m, MasterEpoch: e, SyncStateSet: ss, SyncStateSetEpoch: se}
	if ss == nil {
		s.Group.SyncStateSet = []int64{}
	}
	for _, n := range nodes {
		n.Alive = !slices.Contains(dead, n.BrokerID)
		s.Nodes[n.BrokerID] = n
	}
	return s
}

func nd(id int64, epoch int32, off int64) Node {
	return Node{BrokerID: id, Epoch: epoch, MaxOffset: off}
}

func TestStepTable(t *testing.T) {
	three := []Node{nd(1, 3, 100), nd(2, 3, 100), nd(3, 3, 100)}
	tests := []struct {
		name    string
		s       State
		ev      Event
		opt     Options
		outcome Outcome
		err     error
		changed bool
		master  int64
		epoch   int32
		set     []int64
		setEp   int32
		loss    bool
	}{
		{
			name: "first registration elects the registering node at epoch 1",
			s:    NewState(), ev: NodeRegistered{Node: nd(2, 0, 0)},
			outcome: Elected, changed: true, master: 2, epoch: 1, set: []int64{2}, setEp: 1,
		},
		{
			name: "zero Group behaves as a group that never had a master",
			s:    State{}, ev: NodeRegistered{Node: nd(0, 0, 0)},
			outcome: Elected, changed: true, master: 0, epoch: 1, set: []int64{0}, setEp: 1,
		},
		{
			name: "first election after a wiped group epoch exceeds every reported epoch",
			s:    NewState(), ev: NodeRegistered{Node: nd(4, 7, 500)},
			outcome: Elected, changed: true, master: 4, epoch: 8, set: []int64{4}, setEp: 1,
		},
		{
			name: "registration with a master only records the node",
			s:    group(1, 3, []int64{1}, 2, three[:1]), ev: NodeRegistered{Node: nd(2, 2, 50)},
			outcome: Noted, master: 1, epoch: 3, set: []int64{1}, setEp: 2,
		},
		{
			name: "negative broker id refused",
			s:    NewState(), ev: NodeRegistered{Node: nd(-2, 0, 0)},
			outcome: Rejected, err: ErrBadBrokerID, master: NoMaster, set: []int64{},
		},
		{
			name:    "master lease expiry elects highest epoch",
			s:       group(1, 3, []int64{1, 2, 3}, 5, []Node{nd(1, 3, 900), nd(2, 2, 999), nd(3, 3, 100)}),
			ev:      LeaseExpired{BrokerID: 1},
			outcome: Elected, changed: true, master: 3, epoch: 4, set: []int64{3}, setEp: 6,
		},
		{
			name:    "same epoch: highest max offset wins",
			s:       group(1, 3, []int64{1, 2, 3}, 5, []Node{nd(1, 3, 900), nd(2, 3, 300), nd(3, 3, 200)}),
			ev:      LeaseExpired{BrokerID: 1},
			outcome: Elected, changed: true, master: 2, epoch: 4, set: []int64{2}, setEp: 6,
		},
		{
			name:    "tie on epoch and offset: lowest broker id wins",
			s:       group(1, 3, []int64{1, 2, 3}, 5, []Node{nd(1, 3, 900), nd(3, 3, 300), nd(2, 3, 300)}),
			ev:      LeaseExpired{BrokerID: 1},
			outcome: Elected, changed: true, master: 2, epoch: 4, set: []int64{2}, setEp: 6,
		},
		{
			name:    "only alive members are eligible",
			s:       group(1, 3, []int64{1, 2, 3}, 5, []Node{nd(1, 3, 900), nd(2, 3, 800), nd(3, 3, 100)}, 2),
			ev:      LeaseExpired{BrokerID: 1},
			outcome: Elected, changed: true, master: 3, epoch: 4, set: []int64{3}, setEp: 6,
		},
		{
			name:    "non-members are not eligible even with more data",
			s:       group(1, 3, []int64{1, 3}, 5, []Node{nd(1, 3, 900), nd(2, 3, 999), nd(3, 3, 100)}),
			ev:      LeaseExpired{BrokerID: 1},
			outcome: Elected, changed: true, master: 3, epoch: 4, set: []int64{3}, setEp: 6,
		},
		{
			name:    "no alive member: stays without a master, with a reason",
			s:       group(1, 3, []int64{1, 3}, 5, []Node{nd(1, 3, 900), nd(2, 3, 999), nd(3, 3, 100)}, 3),
			ev:      LeaseExpired{BrokerID: 1},
			outcome: NoMasterLeft, err: ErrNoEligible, changed: true, master: NoMaster, epoch: 3, set: []int64{1, 3}, setEp: 5,
		},
		{
			name: "unclean election picks a non-member and says data loss",
			s:    group(1, 3, []int64{1, 3}, 5, []Node{nd(1, 3, 900), nd(2, 3, 999), nd(3, 3, 100), nd(4, 3, 1000)}, 3),
			ev:   LeaseExpired{BrokerID: 1}, opt: Options{UncleanElection: true},
			outcome: Elected, changed: true, master: 4, epoch: 4, set: []int64{4}, setEp: 6, loss: true,
		},
		{
			name: "unclean election still prefers an alive member",
			s:    group(1, 3, []int64{1, 3}, 5, []Node{nd(1, 3, 900), nd(2, 3, 999), nd(3, 3, 100)}),
			ev:   LeaseExpired{BrokerID: 1}, opt: Options{UncleanElection: true},
			outcome: Elected, changed: true, master: 3, epoch: 4, set: []int64{3}, setEp: 6,
		},
		{
			name: "unclean election with nobody alive: no master",
			s:    group(1, 3, []int64{1, 3}, 5, []Node{nd(1, 3, 900), nd(2, 3, 999)}, 2),
			ev:   LeaseExpired{BrokerID: 1}, opt: Options{UncleanElection: true},
			outcome: NoMasterLeft, err: ErrNoEligible, changed: true, master: NoMaster, epoch: 3, set: []int64{1, 3}, setEp: 5,
		},
		{
			name:    "new epoch exceeds an epoch a node reported",
			s:       group(1, 3, []int64{1, 2}, 5, []Node{nd(1, 3, 900), nd(2, 9, 900)}),
			ev:      LeaseExpired{BrokerID: 1},
			outcome: Elected, changed: true, master: 2, epoch: 10, set: []int64{2}, setEp: 6,
		},
		{
			name: "slave lease expiry changes nothing persisted",
			s:    group(1, 3, []int64{1, 2}, 5, three), ev: LeaseExpired{BrokerID: 2},
			outcome: Noted, master: 1, epoch: 3, set: []int64{1, 2}, setEp: 5,
		},
		{
			name: "lease expiry of an unknown node is nothing to act on",
			s:    group(1, 3, []int64{1}, 5, three), ev: LeaseExpired{BrokerID: 9},
			outcome: Noted, master: 1, epoch: 3, set: []int64{1}, setEp: 5,
		},
		{
			name: "no master: a returning member is elected on heartbeat",
			s: func() State {
				s := group(NoMaster, 3, []int64{1, 3}, 5, three, 1, 3)
				s.Group.NoMasterReason = "x"
				return s
			}(),
			ev:      Heartbeat{BrokerID: 3, Epoch: 3, MaxOffset: 100},
			outcome: Elected, changed: true, master: 3, epoch: 4, set: []int64{3}, setEp: 6,
		},
		{
			name: "no master: a non-member heartbeat leaves it without one, unchanged",
			s: func() State {
				s := group(NoMaster, 3, []int64{1, 3}, 5, three, 1, 3)
				s.Group.NoMasterReason = "x"
				return s
			}(),
			ev:      Heartbeat{BrokerID: 2, Epoch: 3, MaxOffset: 100},
			outcome: NoMasterLeft, err: ErrNoEligible, master: NoMaster, epoch: 3, set: []int64{1, 3}, setEp: 5,
		},
		{
			name: "no master: a returning member is elected on registration",
			s: func() State {
				s := group(NoMaster, 3, []int64{1, 3}, 5, three, 1, 3)
				s.Group.NoMasterReason = "x"
				return s
			}(),
			ev:      NodeRegistered{Node: nd(1, 3, 900)},
			outcome: Elected, changed: true, master: 1, epoch: 4, set: []int64{1}, setEp: 6,
		},
		{
			name:    "heartbeat of an unknown node refused",
			s:       group(1, 3, []int64{1}, 5, three[:1]),
			ev:      Heartbeat{BrokerID: 2, Epoch: 3, MaxOffset: 1},
			outcome: Rejected, err: ErrUnknownBroker, master: 1, epoch: 3, set: []int64{1}, setEp: 5,
		},
		{
			name:    "heartbeat with a negative offset refused",
			s:       group(1, 3, []int64{1}, 5, three),
			ev:      Heartbeat{BrokerID: 2, Epoch: 3, MaxOffset: -1},
			outcome: Rejected, err: ErrCorrupt, master: 1, epoch: 3, set: []int64{1}, setEp: 5,
		},
		{
			name:    "master demotes itself: another member elected",
			s:       group(1, 3, []int64{1, 2}, 5, three),
			ev:      MasterDemoted{BrokerID: 1, Epoch: 3},
			outcome: Elected, changed: true, master: 2, epoch: 4, set: []int64{2}, setEp: 6,
		},
		{
			name:    "master demotes itself, alone in the set: no master",
			s:       group(1, 3, []int64{1}, 5, three),
			ev:      MasterDemoted{BrokerID: 1, Epoch: 3},
			outcome: NoMasterLeft, err: ErrNoEligible, changed: true, master: NoMaster, epoch: 3, set: []int64{1}, setEp: 5,
		},
		{
			name:    "demote from a non-master refused",
			s:       group(1, 3, []int64{1, 2}, 5, three),
			ev:      MasterDemoted{BrokerID: 2, Epoch: 3},
			outcome: Rejected, err: ErrNotMaster, master: 1, epoch: 3, set: []int64{1, 2}, setEp: 5,
		},
		{
			name:    "demote at an old epoch refused",
			s:       group(1, 3, []int64{1, 2}, 5, three),
			ev:      MasterDemoted{BrokerID: 1, Epoch: 2},
			outcome: Rejected, err: ErrStaleMasterEpoch, master: 1, epoch: 3, set: []int64{1, 2}, setEp: 5,
		},
		{
			name:    "set expansion by the master accepted, set epoch bumped",
			s:       group(1, 3, []int64{1}, 5, three),
			ev:      AlterSyncStateSet{Master: 1, MasterEpoch: 3, SetEpoch: 5, Set: []int64{3, 1, 3}},
			outcome: SetAccepted, changed: true, master: 1, epoch: 3, set: []int64{1, 3}, setEp: 6,
		},
		{
			name:    "set shrink accepted",
			s:       group(1, 3, []int64{1, 2, 3}, 5, three, 2),
			ev:      AlterSyncStateSet{Master: 1, MasterEpoch: 3, SetEpoch: 5, Set: []int64{1, 3}},
			outcome: SetAccepted, changed: true, master: 1, epoch: 3, set: []int64{1, 3}, setEp: 6,
		},
		{
			name:    "set change from a non-master refused",
			s:       group(1, 3, []int64{1}, 5, three),
			ev:      AlterSyncStateSet{Master: 2, MasterEpoch: 3, SetEpoch: 5, Set: []int64{1, 2}},
			outcome: Rejected, err: ErrNotMaster, master: 1, epoch: 3, set: []int64{1}, setEp: 5,
		},
		{
			name: "set change without a master refused",
			s: func() State {
				s := group(NoMaster, 3, []int64{1}, 5, three)
				s.Group.NoMasterReason = "x"
				return s
			}(),
			ev:      AlterSyncStateSet{Master: 1, MasterEpoch: 3, SetEpoch: 5, Set: []int64{1, 2}},
			outcome: Rejected, err: ErrNotMaster, master: NoMaster, epoch: 3, set: []int64{1}, setEp: 5,
		},
		{
			name:    "set change at an old master epoch refused",
			s:       group(1, 3, []int64{1}, 5, three),
			ev:      AlterSyncStateSet{Master: 1, MasterEpoch: 2, SetEpoch: 5, Set: []int64{1, 2}},
			outcome: Rejected, err: ErrStaleMasterEpoch, master: 1, epoch: 3, set: []int64{1}, setEp: 5,
		},
		{
			name:    "set change over an old set epoch refused",
			s:       group(1, 3, []int64{1}, 5, three),
			ev:      AlterSyncStateSet{Master: 1, MasterEpoch: 3, SetEpoch: 4, Set: []int64{1, 2}},
			outcome: Rejected, err: ErrStaleSetEpoch, master: 1, epoch: 3, set: []int64{1}, setEp: 5,
		},
		{
			name:    "set without the master refused",
			s:       group(1, 3, []int64{1, 2}, 5, three),
			ev:      AlterSyncStateSet{Master: 1, MasterEpoch: 3, SetEpoch: 5, Set: []int64{2, 3}},
			outcome: Rejected, err: ErrSetWithoutMaster, master: 1, epoch: 3, set: []int64{1, 2}, setEp: 5,
		},
		{
			name:    "set with an unregistered member refused",
			s:       group(1, 3, []int64{1}, 5, three),
			ev:      AlterSyncStateSet{Master: 1, MasterEpoch: 3, SetEpoch: 5, Set: []int64{1, 7}},
			outcome: Rejected, err: ErrUnknownBroker, master: 1, epoch: 3, set: []int64{1}, setEp: 5,
		},
		{
			name:    "set with a dead member refused",
			s:       group(1, 3, []int64{1}, 5, three, 2),
			ev:      AlterSyncStateSet{Master: 1, MasterEpoch: 3, SetEpoch: 5, Set: []int64{1, 2}},
			outcome: Rejected, err: ErrBrokerNotAlive, master: 1, epoch: 3, set: []int64{1}, setEp: 5,
		},
		{
			name:    "unchanged set refused",
			s:       group(1, 3, []int64{1, 2}, 5, three),
			ev:      AlterSyncStateSet{Master: 1, MasterEpoch: 3, SetEpoch: 5, Set: []int64{2, 1}},
			outcome: Rejected, err: ErrSetUnchanged, master: 1, epoch: 3, set: []int64{1, 2}, setEp: 5,
		},
		{
			name:    "oversized set refused",
			s:       group(1, 3, []int64{1}, 5, three),
			ev:      AlterSyncStateSet{Master: 1, MasterEpoch: 3, SetEpoch: 5, Set: make([]int64, MaxSetSize+1)},
			outcome: Rejected, err: ErrCorrupt, master: 1, epoch: 3, set: []int64{1}, setEp: 5,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.s.Clone()
			got, d := Step(tc.s, tc.ev, tc.opt)
			if d.Outcome != tc.outcome {
				t.Fatalf("outcome %v (err %v), want %v", d.Outcome, d.Err, tc.outcome)
			}
			if tc.err == nil && d.Err != nil {
				t.Fatalf("unexpected error %v", d.Err)
			}
			if tc.err != nil && !errors.Is(d.Err, tc.err) {
				t.Fatalf("error %v, want %v", d.Err, tc.err)
			}
			if d.Changed != tc.changed {
				t.Fatalf("changed %v, want %v", d.Changed, tc.changed)
			}
			if d.Master != tc.master || d.MasterEpoch != tc.epoch || !slices.Equal(d.Set, tc.set) || d.SetEpoch != tc.setEp {
				t.Fatalf("decision master %d epoch %d set %v set epoch %d, want %d %d %v %d",
					d.Master, d.MasterEpoch, d.Set, d.SetEpoch, tc.master, tc.epoch, tc.set, tc.setEp)
			}
			if g := got.Group; g.Master != d.Master || g.MasterEpoch != d.MasterEpoch || !slices.Equal(g.SyncStateSet, d.Set) || g.SyncStateSetEpoch != d.SetEpoch {
				t.Fatalf("state %+v does not match decision %+v", g, d)
			}
			if d.DataLoss != tc.loss || got.Group.Unclean != tc.loss {
				t.Fatalf("data loss %v (state %v), want %v", d.DataLoss, got.Group.Unclean, tc.loss)
			}
			if lost := got.Group.Master == NoMaster && got.Group.MasterEpoch > 0; lost != (got.Group.NoMasterReason != "") {
				t.Fatalf("no-master reason %q with master %d at epoch %d", got.Group.NoMasterReason, got.Group.Master, got.Group.MasterEpoch)
			}
			if err := got.Group.Validate(); err != nil {
				t.Fatalf("result invalid: %v", err)
			}
			if !before.Group.Equal(tc.s.Group) || len(before.Nodes) != len(tc.s.Nodes) {
				t.Fatal("Step modified its input")
			}
			for id, n := range before.Nodes {
				if tc.s.Nodes[id] != n {
					t.Fatalf("Step modified input node %d", id)
				}
			}
		})
	}
}

func TestStepNoMasterReasonOncePerStateChange(t *testing.T) {
	s := group(1, 3, []int64{1}, 2, []Node{nd(1, 3, 10), nd(2, 3, 10)})
	s, d := Step(s, LeaseExpired{BrokerID: 1}, Options{})
	if d.Outcome != NoMasterLeft || !d.Changed {
		t.Fatalf("expiry: %+v", d)
	}
	reason := s.Group.NoMasterReason
	for range 3 {
		s, d = Step(s, Heartbeat{BrokerID: 2, Epoch: 3, MaxOffset: 20}, Options{})
		if d.Outcome != NoMasterLeft || d.Changed || s.Group.NoMasterReason != reason {
			t.Fatalf("repeated no-master step changed the group: %+v, reason %q", d, s.Group.NoMasterReason)
		}
	}
	if s.Nodes[2].MaxOffset != 20 {
		t.Fatalf("heartbeat not recorded: %+v", s.Nodes[2])
	}
	s, d = Step(s, NodeRegistered{Node: nd(1, 3, 10)}, Options{})
	if d.Outcome != Elected || d.Master != 1 || d.MasterEpoch != 4 || s.Group.NoMasterReason != "" {
		t.Fatalf("return of the member: %+v %+v", d, s.Group)
	}
}

func TestStepUnknownEvent(t *testing.T) {
	_, d := Step(NewState(), nil, Options{})
	if d.Outcome != Rejected || !errors.Is(d.Err, ErrCorrupt) || d.Changed {
		t.Fatalf("%+v", d)
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[Outcome]string{Noted: "noted", Elected: "elected", NoMasterLeft: "no-master", SetAccepted: "set-accepted", Rejected: "rejected", 9: "outcome(9)"} {
		if o.String() != want {
			t.Errorf("%d: %q, want %q", int(o), o.String(), want)
		}
	}
}
