// Package member makes a core.Replica a member of a controller-mode group
// (RocketMQ 5's ReplicasManager on top of package controller/etcdstore):
// it registers the node on an etcd lease, keeps the lease and its
// reports alive, follows the group's state, fences a master that may no
// longer be one, and routes the master's in-sync set changes through
// etcd.
//
// # Use
//
//	m, err := member.New(member.Config{
//		Replica: core.ReplicaConfig{Store: log, Transport: tcp, Epochs: epochs,
//			Master: core.MasterConfig{ListenAddr: "10.0.0.1:10912", Role: core.SyncMaster}},
//		Store: store, Group: "orders", BrokerID: 1, APIAddr: "10.0.0.1:8080",
//	})
//	go m.Run(ctx)               // until ctx ends
//	res, err := m.Put(ctx, msg) // on the master; checks the lease first and last
//	st := m.Status()            // role, epoch, master id and API address, in-sync set
//
// New builds the replica with the controller's confirmer
// (Replica.Master.SyncStateSetConfirmer) and the broker id; the
// replica's Master.ListenAddr (or Config.HAAddr) must have a fixed port:
// it is registered before any listener exists.
//
// # Registration and reports
//
// Run registers {broker id, HA address, API address, epoch, max offset}
// on a lease of LeaseTTL (3 s), renews the lease every RenewInterval
// (TTL/6) with its own keep-alive requests (timed, see below) on top of
// the registration's, and reports the replica's last epoch and max offset
// every HeartbeatInterval (TTL/3, Registration.Update: a group without a
// master elects on them). Config.Supervise also runs Store.Supervise for
// the group: elections on lease expiry without a controller process.
//
// # Roles
//
// Each value of the group key (Store.Watch), read with the group's
// registrations:
//
//	state                           replica
//	------------------------------  --------------------------------------------
//	master = this node, epoch E     BecomeMaster(E) when E is newer than its
//	                                epoch file and the lease is valid; already
//	                                master of E unfenced: nothing; otherwise
//	                                (fenced, restarted with E in its file, or
//	                                BecomeMaster failed: its HA address is
//	                                taken, say) step MasterDemoted(E): the
//	                                controller elects again, at a higher epoch
//	master = another node           BecomeSlave(its registered HA address); no
//	                                live registration: fenced if master, wait
//	no master                       fenced if master, otherwise as is
//	an epoch older than one applied ignored
//
// # Fencing
//
// etcd renews a lease no earlier than the keep-alive request was sent,
// and expires it TTL after its last renewal; the controller elects on
// the expiry, after its election delay (the controller command waits one
// more TTL). A member records the send time of each renewal that etcd
// answered; FenceAfter (TTL/2) past the last one, a timer fences the
// master at once (Replica.Fence: new puts refused, waiting sync puts
// failed, in-sync set frozen), whatever the run loop is doing. So the
// fence comes at least TTL/2 plus the election delay before any other
// node can be elected: the margin covers the clock-rate difference
// between the node and etcd and the timer's scheduling. A lease that etcd
// reports gone, a registration that ends, or a report refused because the
// key is on another lease fences too. The member then closes the
// registration (revoking the lease when etcd answers) and registers again
// every HeartbeatInterval until etcd answers.
//
// A paused process (SIGSTOP past the TTL) resumes before its timer runs.
// Member.Put therefore checks the lease's validity by the monotonic clock
// (Config.Now) before the put and again when it returns: past the
// deadline it answers an error wrapping ErrLeaseExpired and
// core.ErrFenced instead of PUT_OK (a put that ran across the deadline
// may be stored here, and cut later). Member.PutBatch applies both checks
// to the batch: refused whole before, and every message answered without an
// error gets the same error with its result when the deadline passed while
// the batch ran. Puts that call Replica.Put directly get only the timer's
// fence.
//
// # In-sync set
//
// The master's set changes go through etcdstore's Confirmer
// (AlterSyncStateSet): they take effect only once etcd has them, and only
// while the lease is valid. A proposal whose outcome is unknown (an etcd
// error that may follow a commit) is made again every RenewInterval until
// the controller answers or the lease ends: answering the error would
// leave the master with its old set while etcd may hold the new one. A sync put waits for every member of the
// confirmed set (core), so a master elected from that set holds every
// PUT_OK message.
//
// # Observability
//
// Logs (go-hclog, named "member", with group and broker_id): every group
// state change and role change at INFO; a fence, a lost registration and
// a self-demotion at WARN; a failed role change at ERROR. Metrics, labelled
// group and broker_id: replicator_controller_member_role (0 none, 1
// master, 2 slave), _fenced, _epoch, _registered (gauges),
// _role_changes_total, _lease_renew_failures_total, _lease_lost_total,
// _heartbeat_failures_total and _puts_refused_total{when=before|during}.
package member
