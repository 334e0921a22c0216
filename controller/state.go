package controller

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// NoMaster is Group.Master when the group has no master.
const NoMaster int64 = -1

// Bounds checked by DecodeGroup and DecodeNode before anything is kept.
const (
	// MaxEncodedSize bounds an encoded group state or node registration.
	MaxEncodedSize = 64 << 10
	// MaxSetSize bounds the number of members of an in-sync set.
	MaxSetSize = 1024
	// MaxTextSize bounds a reason or an address.
	MaxTextSize = 1024
)

// Group is the persisted part of a group's state: its master, the master
// epoch, the in-sync set (RocketMQ's SyncStateSet) and the set's epoch.
// The zero Group is a group that never had a master (Normalize turns its
// Master into NoMaster).
type Group struct {
	// Master is the broker id of the master, NoMaster when there is none.
	Master int64 `json:"master"`
	// MasterEpoch is the epoch of the last election (0: never elected).
	// It only grows, and every election makes it strictly greater.
	MasterEpoch int32 `json:"master_epoch"`
	// SyncStateSet holds the broker ids of the in-sync set, ascending,
	// without duplicates; it contains Master whenever there is one.
	SyncStateSet []int64 `json:"sync_state_set"`
	// SyncStateSetEpoch grows by one at every change of SyncStateSet.
	SyncStateSetEpoch int32 `json:"sync_state_set_epoch"`
	// Unclean is true when the current master was elected from outside
	// the in-sync set (UncleanElection): messages acknowledged before it
	// may be lost.
	Unclean bool `json:"unclean,omitempty"`
	// NoMasterReason says why the group has no master ("" otherwise or
	// before the first election).
	NoMasterReason string `json:"no_master_reason,omitempty"`
}

// Node is what the controller knows of one registered broker.
type Node struct {
	BrokerID int64 `json:"broker_id"`
	// HAAddr and APIAddr are the node's HA listener and API addresses.
	HAAddr  string `json:"ha_addr,omitempty"`
	APIAddr string `json:"api_addr,omitempty"`
	// Epoch and MaxOffset are the last epoch and the commit-log max
	// offset the node reported (registration or heartbeat).
	Epoch     int32 `json:"epoch"`
	MaxOffset int64 `json:"max_offset"`
	// Alive is true while the node's registration lasts (in etcd: its
	// lease). It is not encoded: a store derives it.
	Alive bool `json:"-"`
}

// State is a group's whole state as the state machine sees it.
type State struct {
	Group Group
	// Nodes holds every broker that registered, alive or not, by id.
	Nodes map[int64]Node
}

// NewState returns the state of a group that never had a master and has
// no node.
func NewState() State {
	return State{Group: Group{Master: NoMaster, SyncStateSet: []int64{}}, Nodes: map[int64]Node{}}
}

// Normalize returns g with the zero-value conventions resolved: epoch 0
// means no master, and a nil set is the empty set.
func (g Group) Normalize() Group {
	if g.MasterEpoch == 0 {
		g.Master = NoMaster
	}
	if g.SyncStateSet == nil {
		g.SyncStateSet = []int64{}
	}
	return g
}

// Clone returns a deep copy of g.
func (g Group) Clone() Group {
	g.SyncStateSet = slices.Clone(g.SyncStateSet)
	if g.SyncStateSet == nil {
		g.SyncStateSet = []int64{}
	}
	return g
}

// Equal reports whether g and o are the same state.
func (g Group) Equal(o Group) bool {
	return g.Master == o.Master && g.MasterEpoch == o.MasterEpoch &&
		slices.Equal(g.SyncStateSet, o.SyncStateSet) && g.SyncStateSetEpoch == o.SyncStateSetEpoch &&
		g.Unclean == o.Unclean && g.NoMasterReason == o.NoMasterReason
}

// InSet reports whether id is a member of the in-sync set.
func (g Group) InSet(id int64) bool {
	_, ok := slices.BinarySearch(g.SyncStateSet, id)
	return ok
}

// Clone returns a deep copy of s.
func (s State) Clone() State {
	c := State{Group: s.Group.Clone(), Nodes: maps.Clone(s.Nodes)}
	if c.Nodes == nil {
		c.Nodes = map[int64]Node{}
	}
	return c
}

// Validate checks g's invariants: epochs not negative, a master only with
// an epoch, the set ascending without duplicates, bounded, and holding the
// master.
func (g Group) Validate() error {
	if g.MasterEpoch < 0 || g.SyncStateSetEpoch < 0 {
		return fmt.Errorf("%w: negative epoch (master %d, set %d)", ErrCorrupt, g.MasterEpoch, g.SyncStateSetEpoch)
	}
	if g.Master < NoMaster {
		return fmt.Errorf("%w: master %d", ErrCorrupt, g.Master)
	}
	if g.Master != NoMaster && g.MasterEpoch == 0 {
		return fmt.Errorf("%w: master %d at epoch 0", ErrCorrupt, g.Master)
	}
	if len(g.SyncStateSet) > MaxSetSize {
		return fmt.Errorf("%w: %d in-sync members (max %d)", ErrCorrupt, len(g.SyncStateSet), MaxSetSize)
	}
	for i, id := range g.SyncStateSet {
		if id < 0 {
			return fmt.Errorf("%w: in-sync member %d", ErrCorrupt, id)
		}
		if i > 0 && g.SyncStateSet[i-1] >= id {
			return fmt.Errorf("%w: in-sync set %v not ascending", ErrCorrupt, g.SyncStateSet)
		}
	}
	if g.Master != NoMaster && !g.InSet(g.Master) {
		return fmt.Errorf("%w: in-sync set %v lacks master %d", ErrCorrupt, g.SyncStateSet, g.Master)
	}
	if len(g.NoMasterReason) > MaxTextSize {
		return fmt.Errorf("%w: reason of %d bytes", ErrCorrupt, len(g.NoMasterReason))
	}
	return nil
}

// Validate checks n: id not negative, epoch and offset not negative,
// addresses bounded.
func (n Node) Validate() error {
	if n.BrokerID < 0 {
		return fmt.Errorf("%w: %d", ErrBadBrokerID, n.BrokerID)
	}
	if n.Epoch < 0 || n.MaxOffset < 0 {
		return fmt.Errorf("%w: node %d reports epoch %d, max offset %d", ErrCorrupt, n.BrokerID, n.Epoch, n.MaxOffset)
	}
	if len(n.HAAddr) > MaxTextSize || len(n.APIAddr) > MaxTextSize {
		return fmt.Errorf("%w: node %d address too long", ErrCorrupt, n.BrokerID)
	}
	return nil
}

// EncodeGroup returns g as JSON (see the package doc). It fails only on a
// Group that does not Validate.
func EncodeGroup(g Group) ([]byte, error) {
	g = g.Normalize()
	if err := g.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(g)
}

// DecodeGroup parses a group state written by EncodeGroup: at most
// MaxEncodedSize bytes, one JSON object, every invariant of Validate.
// Unknown fields are ignored (a newer writer may add some).
func DecodeGroup(b []byte) (Group, error) {
	var g Group
	if err := decodeJSON(b, &g); err != nil {
		return Group{}, err
	}
	if g.SyncStateSet == nil {
		g.SyncStateSet = []int64{}
	}
	if err := g.Validate(); err != nil {
		return Group{}, err
	}
	return g, nil
}

// EncodeNode returns n as JSON; Alive is not encoded.
func EncodeNode(n Node) ([]byte, error) {
	if err := n.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(n)
}

// DecodeNode parses a node registration written by EncodeNode, with the
// same bounds as DecodeGroup. Alive is false in the result.
func DecodeNode(b []byte) (Node, error) {
	var n Node
	if err := decodeJSON(b, &n); err != nil {
		return Node{}, err
	}
	if err := n.Validate(); err != nil {
		return Node{}, err
	}
	return n, nil
}

func decodeJSON(b []byte, v any) error {
	if len(b) > MaxEncodedSize {
		return fmt.Errorf("%w: %d bytes (max %d)", ErrCorrupt, len(b), MaxEncodedSize)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: data after the object", ErrCorrupt)
	}
	return nil
}
