// Package etcdstore keeps controller-mode groups in etcd: thin glue
// between the pure state machine of package controller and
// go.etcd.io/etcd/client/v3.
//
// Key space (see package controller for the JSON values):
//
//	<prefix>/groups/<group>/state             one versioned key: master, master epoch,
//	                                          in-sync set and its epoch
//	<prefix>/groups/<group>/nodes/<broker-id> a node's registration, on its lease
//
// Every change of the group key is a transaction: Step reads the group's
// keys at one revision (Load), steps the machine, and writes the new Group
// only if the key's mod revision is still the one read (0: absent) and, for
// an election or an accepted set, if the chosen nodes' registrations are
// still the ones read (their create revisions). A transaction that fails
// the compare lost the race to another writer: Step reads again and steps
// the machine on the new state (counted in
// replicator_controller_revision_conflicts_total), up to
// Config.MaxAttempts. Any number of processes may step the same group.
//
// Register grants a lease (DefaultTTL 3 s, whole seconds), writes the
// node key on it (refused while another live registration holds the id),
// keeps it alive from a goroutine and steps NodeRegistered. When the
// process dies or loses etcd for the TTL, etcd deletes the key: WatchNodes
// reports it and whoever sees it steps LeaseExpired (repeats are harmless).
// Registration.Update writes the node's epoch and max offset and steps
// Heartbeat. Watch delivers the group key's values; Confirmer adapts a
// master's in-sync set proposals (core.SyncStateSetConfirmer) to
// AlterSyncStateSet steps. DeleteGroup removes a group's keys.
//
// Logs: an election at INFO, an unclean one and a group left without a
// master at ERROR (once per state change), a refused event at WARN. The
// metric replicator_controller_decisions_total{outcome} counts the changes
// written (elected, unclean, no_master, set_accepted).
package etcdstore
