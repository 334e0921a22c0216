package controller

import "errors"

// Reasons a step refuses an event or leaves the group without a master.
// Decisions wrap them with context; check them with errors.Is.
var (
	// ErrNoEligible: no alive node may be elected (no alive member of
	// the in-sync set, and UncleanElection is off or no node is alive).
	ErrNoEligible = errors.New("controller: no eligible node")
	// ErrNotMaster: the proposer of an in-sync set change is not the
	// current master (or the group has none).
	ErrNotMaster = errors.New("controller: proposer is not the current master")
	// ErrStaleMasterEpoch: the event names another master epoch than the
	// current one.
	ErrStaleMasterEpoch = errors.New("controller: stale master epoch")
	// ErrStaleSetEpoch: the proposal was based on another in-sync set
	// epoch than the current one.
	ErrStaleSetEpoch = errors.New("controller: stale in-sync set epoch")
	// ErrSetWithoutMaster: a proposed in-sync set lacks the master.
	ErrSetWithoutMaster = errors.New("controller: in-sync set does not contain the master")
	// ErrSetUnchanged: the proposed in-sync set equals the current one.
	ErrSetUnchanged = errors.New("controller: in-sync set unchanged")
	// ErrUnknownBroker: the event names a broker that never registered.
	ErrUnknownBroker = errors.New("controller: unknown broker")
	// ErrBrokerNotAlive: a proposed in-sync member has no live
	// registration.
	ErrBrokerNotAlive = errors.New("controller: broker not alive")
	// ErrBadBrokerID: a broker id is negative.
	ErrBadBrokerID = errors.New("controller: invalid broker id")
	// ErrMasterAlive: the master is alive; there is nothing to elect.
	ErrMasterAlive = errors.New("controller: master still alive")
	// ErrCorrupt: an encoded group state is malformed or violates an
	// invariant.
	ErrCorrupt = errors.New("controller: corrupt group state")
)
