package etcdstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/replicatorhq/replicator/controller"
)

// DefaultTTL is a registration's lease TTL when none is given.
const DefaultTTL = 3 * time.Second

// Registration is a broker's live registration in a group: a node key on
// an etcd lease that a goroutine keeps alive. When the process dies or
// cannot reach etcd for the TTL, the lease expires and etcd deletes the
// key.
type Registration struct {
	s      *Store
	group  string
	id     int64
	lease  clientv3.LeaseID
	cancel context.CancelFunc
	done   chan struct{} // keep-alive goroutine ended
	lost   chan struct{} // closed when the lease ended

	mu   sync.Mutex
	node controller.Node
}

// leaseSeconds rounds ttl up to whole seconds (etcd's unit), at least 1.
func leaseSeconds(ttl time.Duration) int64 {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return max(1, int64((ttl+time.Second-1)/time.Second))
}

// Register grants a lease of ttl (DefaultTTL when 0; etcd counts whole
// seconds and may raise it to its minimum), writes node's key on it
// unless a live registration holds the id (ErrAlreadyRegistered), keeps
// the lease alive, and steps controller.NodeRegistered (a group without a
// master may elect the node). The decision is that step's.
func (s *Store) Register(ctx context.Context, group string, node controller.Node, ttl time.Duration) (*Registration, controller.Decision, error) {
	if err := ValidGroup(group); err != nil {
		return nil, controller.Decision{}, err
	}
	val, err := controller.EncodeNode(node)
	if err != nil {
		return nil, controller.Decision{}, fmt.Errorf("etcdstore: register in %s: %w", group, err)
	}
	grant, err := s.cli.Grant(ctx, leaseSeconds(ttl))
	if err != nil {
		return nil, controller.Decision{}, fmt.Errorf("etcdstore: lease for node %d of %s: %w", node.BrokerID, group, err)
	}
	key := s.NodeKey(group, node.BrokerID)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(grant.ID))).Commit()
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("%w: node %d of %s", ErrAlreadyRegistered, node.BrokerID, group)
	}
	if err != nil {
		s.revoke(grant.ID)
		return nil, controller.Decision{}, fmt.Errorf("etcdstore: register node %d in %s: %w", node.BrokerID, group, err)
	}
	kctx, cancel := context.WithCancel(context.Background())
	ka, err := s.cli.KeepAlive(kctx, grant.ID)
	if err != nil {
		cancel()
		s.revoke(grant.ID)
		return nil, controller.Decision{}, fmt.Errorf("etcdstore: keep lease of node %d of %s alive: %w", node.BrokerID, group, err)
	}
	r := &Registration{s: s, group: group, id: node.BrokerID, lease: grant.ID, cancel: cancel,
		done: make(chan struct{}), lost: make(chan struct{}), node: node}
	go r.keepAlive(kctx, ka)
	s.log.Info("registered", "group", group, "broker_id", node.BrokerID, "lease", fmt.Sprintf("%x", int64(grant.ID)), "ttl_s", grant.TTL)
	d, err := s.Step(ctx, group, controller.NodeRegistered{Node: node})
	if err != nil {
		r.Close(context.Background())
		return nil, controller.Decision{}, err
	}
	return r, d, nil
}

func (s *Store) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.cli.Revoke(ctx, id); err != nil {
		s.log.Debug("revoke lease", "lease", fmt.Sprintf("%x", int64(id)), "error", err)
	}
}

// keepAlive drains the keep-alive responses; the channel closes when the
// lease ends or cannot be renewed, or on Close.
func (r *Registration) keepAlive(ctx context.Context, ka <-chan *clientv3.LeaseKeepAliveResponse) {
	defer close(r.done)
	for range ka {
	}
	if ctx.Err() == nil {
		r.s.log.Warn("registration lease lost", "group", r.group, "broker_id", r.id, "lease", fmt.Sprintf("%x", int64(r.lease)))
	}
	close(r.lost)
}

// Lost is closed when the lease ends: not renewed in time (etcd
// unreachable), revoked, or Close.
func (r *Registration) Lost() <-chan struct{} { return r.lost }

// LeaseID is the registration's etcd lease.
func (r *Registration) LeaseID() int64 { return int64(r.lease) }

// Update writes the node's last epoch and max offset on its key (only
// while the key is still on this registration's lease: ErrLeaseLost
// otherwise) and steps controller.Heartbeat.
func (r *Registration) Update(ctx context.Context, epoch int32, maxOffset int64) (controller.Decision, error) {
	r.mu.Lock()
	n := r.node
	n.Epoch, n.MaxOffset = epoch, maxOffset
	r.mu.Unlock()
	val, err := controller.EncodeNode(n)
	if err != nil {
		return controller.Decision{}, fmt.Errorf("etcdstore: update node %d of %s: %w", r.id, r.group, err)
	}
	key := r.s.NodeKey(r.group, r.id)
	resp, err := r.s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(key), "=", r.lease)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(r.lease))).Commit()
	if err != nil {
		return controller.Decision{}, fmt.Errorf("etcdstore: update node %d of %s: %w", r.id, r.group, err)
	}
	if !resp.Succeeded {
		return controller.Decision{}, fmt.Errorf("%w: node %d of %s", ErrLeaseLost, r.id, r.group)
	}
	r.mu.Lock()
	r.node = n
	r.mu.Unlock()
	return r.s.Step(ctx, r.group, controller.Heartbeat{BrokerID: r.id, Epoch: epoch, MaxOffset: maxOffset})
}

// Close stops renewing and revokes the lease (etcd deletes the key at
// once), then waits for the keep-alive goroutine.
func (r *Registration) Close(ctx context.Context) error {
	r.cancel()
	_, err := r.s.cli.Revoke(ctx, r.lease)
	<-r.done
	if err != nil {
		return fmt.Errorf("etcdstore: revoke lease of node %d of %s: %w", r.id, r.group, err)
	}
	return nil
}
