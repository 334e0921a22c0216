// Package controller is the election and in-sync-set logic of controller
// mode (RocketMQ 5's controller, spec sections 10.6 and 11): a pure state
// machine, stepped by events as etcd's raft is, with no I/O, no goroutine
// and no clock. A store (package controller/etcdstore) reads a group's
// State, calls Step, and persists the result; it steps again on a fresh
// read when another writer got there first.
//
// # State
//
// A group's persisted state (Group) is its master broker id (NoMaster when
// none), the master epoch, the in-sync set (RocketMQ's SyncStateSet: the
// master and the slaves that hold everything it acknowledged) and the
// set's epoch. The registered nodes (Node) carry their addresses, the last
// epoch and commit-log max offset they reported, and whether their
// registration (an etcd lease) is alive.
//
// # Events and decisions
//
//	event                    effect                                   outcome
//	-----------------------  ---------------------------------------  ------------------------
//	NodeRegistered{node}     node alive; no master: elect             Noted | Elected | NoMasterLeft | Rejected
//	Heartbeat{id,epoch,off}  node's epoch and offset; no master: elect Noted | Elected | NoMasterLeft | Rejected
//	LeaseExpired{id}         node dead; it was the master: elect      Noted | Elected | NoMasterLeft
//	MasterDemoted{id,epoch}  current master at its epoch: elect       Elected | NoMasterLeft | Rejected
//	                         among the others
//	AlterSyncStateSet{m,     only from the current master at the      SetAccepted | Rejected
//	  epoch,setEpoch,set}    current master epoch, over the current
//	                         set epoch, a changed set of alive
//	                         registered nodes that holds the master;
//	                         the set epoch grows by one
//
// Step returns the new State and a Decision: the outcome, whether the
// Group changed (and so must be written), the group's master, epochs and
// set after the step, DataLoss for an unclean election, and the reason of
// a rejection or of a missing master (an error wrapping ErrNoEligible,
// ErrNotMaster, ErrStaleMasterEpoch, ErrStaleSetEpoch,
// ErrSetWithoutMaster, ErrSetUnchanged, ErrUnknownBroker,
// ErrBrokerNotAlive, ErrBadBrokerID or ErrCorrupt; check with errors.Is).
// A group left without a master records why (Group.NoMasterReason); the
// same step repeated does not change the Group again, so a store logs one
// ERROR line per state change.
//
// # Election
//
// Eligible: the alive members of the in-sync set (the lost master
// excluded). The first election of a group (epoch 0, empty set) takes any
// alive node. With Options.UncleanElection, when no member is alive, any
// alive node is eligible and the decision says DataLoss (the node may lack
// acknowledged messages). Among the eligible, the winner has the highest
// reported epoch, then the highest max offset, then the lowest broker id
// (RocketMQ's DefaultElectPolicy order). The new epoch is one more than
// the largest of the group's epoch and every epoch a node reported, so it
// is strictly greater than any epoch the winner's epoch file holds. The
// new in-sync set is the winner alone (RocketMQ's ElectMasterEvent), at
// the next set epoch: slaves rejoin it as they catch up, through the new
// master's AlterSyncStateSet. No eligible node: the group keeps its epoch
// and set, has no master, and says why; a later registration or
// heartbeat of a member elects it.
//
// The safety properties, checked after every step of seeded random
// histories in model_test.go: at most one master per epoch; each election
// raises the epoch; an elected node was in the confirmed in-sync set
// (unless unclean, or the group's first election); the set always holds
// the master; and therefore, as long as masters acknowledge a put only
// once every member of the confirmed set holds it, a newly elected master
// holds every acknowledged message.
//
// # Key space (package etcdstore)
//
//	<prefix>/groups/<group>/state             the Group as JSON; changed only by
//	                                          transactions comparing its mod revision
//	<prefix>/groups/<group>/nodes/<broker-id> a Node as JSON, on the node's lease
//	                                          (deleted by etcd when the lease expires)
//
// The prefix is "/replicator" by default; group names are 1 to 128 of
// [A-Za-z0-9._-]; broker ids are decimal. Deleting a group deletes the
// prefix <prefix>/groups/<group>/. The group key's JSON, for master 2 at
// epoch 4 with in-sync set {1, 2, 3} at set epoch 9:
//
//	{"master":2,"master_epoch":4,"sync_state_set":[1,2,3],"sync_state_set_epoch":9}
//
// and, for a group whose master was lost with no member alive:
//
//	{"master":-1,"master_epoch":7,"sync_state_set":[0,3],"sync_state_set_epoch":2,
//	 "no_master_reason":"lease of master 0 expired: no alive member of the in-sync set [0 3]"}
//
// "unclean":true marks a master elected from outside the set. A node key:
//
//	{"broker_id":3,"ha_addr":"127.0.0.1:10912","api_addr":"127.0.0.1:10911","epoch":4,"max_offset":1048576}
//
// DecodeGroup and DecodeNode accept at most MaxEncodedSize bytes, one
// object, and only values that satisfy the invariants (ascending unique
// set of at most MaxSetSize non-negative ids holding the master, no master
// at epoch 0, bounded texts); unknown fields are ignored.
package controller
