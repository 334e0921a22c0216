package etcdstore

import (
	"context"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/replicatorhq/replicator/controller"
)

// retryDelay is the pause before a watch that failed is set up again.
const retryDelay = 200 * time.Millisecond

// GroupUpdate is one value of the group key seen by Watch.
type GroupUpdate struct {
	Group controller.Group
	// Exists is false when the key is absent (never written, or the
	// group deleted).
	Exists bool
	// Revision is the key's mod revision (the deletion's for a delete).
	Revision int64
	// Err is a malformed value (controller.ErrCorrupt): Group is then
	// zero.
	Err error
}

// NodeUpdate is one change of a registration seen by WatchNodes.
type NodeUpdate struct {
	BrokerID int64
	Node     controller.Node
	// Alive is false when the key was deleted: the lease expired or was
	// revoked, or the group was deleted.
	Alive    bool
	Revision int64
}

// Watch delivers the group key's current value, then every change, until
// ctx ends (the channel is then closed). A watch that fails (etcd
// compacted the revision it needs, the connection broke) starts again
// from a fresh read, so a consumer may miss intermediate values but
// always gets the latest.
func (s *Store) Watch(ctx context.Context, group string) (<-chan GroupUpdate, error) {
	if err := ValidGroup(group); err != nil {
		return nil, err
	}
	ch := make(chan GroupUpdate, 1)
	key := s.StateKey(group)
	go func() {
		defer close(ch)
		for ctx.Err() == nil {
			resp, err := s.cli.Get(ctx, key)
			if err != nil {
				s.log.Debug("watch: read group key", "group", group, "error", err)
				if !sleep(ctx, retryDelay) {
					return
				}
				continue
			}
			u := GroupUpdate{}
			if len(resp.Kvs) == 1 {
				u = s.groupUpdate(group, resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
			}
			if !send(ctx, ch, u) {
				return
			}
			wctx, cancel := context.WithCancel(ctx)
			for wr := range s.cli.Watch(wctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
				if err := wr.Err(); err != nil {
					s.log.Debug("watch of group key ended", "group", group, "error", err)
					break
				}
				for _, ev := range wr.Events {
					u := GroupUpdate{Revision: ev.Kv.ModRevision}
					if ev.Type == clientv3.EventTypePut {
						u = s.groupUpdate(group, ev.Kv.Value, ev.Kv.ModRevision)
					}
					if !send(ctx, ch, u) {
						cancel()
						return
					}
				}
			}
			cancel()
			if !sleep(ctx, retryDelay) {
				return
			}
		}
	}()
	return ch, nil
}

func (s *Store) groupUpdate(group string, val []byte, rev int64) GroupUpdate {
	g, err := controller.DecodeGroup(val)
	if err != nil {
		s.log.Warn("malformed group key", "group", group, "revision", rev, "error", err)
		return GroupUpdate{Exists: true, Revision: rev, Err: err}
	}
	return GroupUpdate{Group: g, Exists: true, Revision: rev}
}

// WatchNodes delivers the group's live registrations, then every change
// (a deletion is a lease that expired or was revoked), until ctx ends.
// After a failed watch it reads the registrations again and delivers
// them all. Malformed registrations are logged and skipped.
func (s *Store) WatchNodes(ctx context.Context, group string) (<-chan NodeUpdate, error) {
	if err := ValidGroup(group); err != nil {
		return nil, err
	}
	ch := make(chan NodeUpdate, 16)
	prefix := s.nodesPrefix(group)
	go func() {
		defer close(ch)
		for ctx.Err() == nil {
			resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithLimit(controller.MaxSetSize+1))
			if err != nil {
				s.log.Debug("watch: read registrations", "group", group, "error", err)
				if !sleep(ctx, retryDelay) {
					return
				}
				continue
			}
			for _, kv := range resp.Kvs {
				if u, ok := s.nodeUpdate(group, prefix, kv.Key, kv.Value, kv.ModRevision, true); ok && !send(ctx, ch, u) {
					return
				}
			}
			wctx, cancel := context.WithCancel(ctx)
			for wr := range s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
				if err := wr.Err(); err != nil {
					s.log.Debug("watch of registrations ended", "group", group, "error", err)
					break
				}
				for _, ev := range wr.Events {
					u, ok := s.nodeUpdate(group, prefix, ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision, ev.Type == clientv3.EventTypePut)
					if ok && !send(ctx, ch, u) {
						cancel()
						return
					}
				}
			}
			cancel()
			if !sleep(ctx, retryDelay) {
				return
			}
		}
	}()
	return ch, nil
}

func (s *Store) nodeUpdate(group, prefix string, key, val []byte, rev int64, alive bool) (NodeUpdate, bool) {
	id, err := strconv.ParseInt(strings.TrimPrefix(string(key), prefix), 10, 64)
	if err != nil || id < 0 {
		s.log.Warn("ignoring a malformed registration key", "group", group, "key", string(key))
		return NodeUpdate{}, false
	}
	u := NodeUpdate{BrokerID: id, Alive: alive, Revision: rev}
	if !alive {
		return u, true
	}
	n, err := controller.DecodeNode(val)
	if err == nil && n.BrokerID != id {
		err = controller.ErrCorrupt
	}
	if err != nil {
		s.log.Warn("ignoring a malformed node registration", "group", group, "key", string(key), "error", err)
		return NodeUpdate{}, false
	}
	n.Alive = true
	u.Node = n
	return u, true
}

func send[T any](ctx context.Context, ch chan<- T, v T) bool {
	select {
	case ch <- v:
		return true
	case <-ctx.Done():
		return false
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
