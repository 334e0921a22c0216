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
	go follow(ctx, s, ch, feed[GroupUpdate]{
		what:  "group key",
		group: group,
		key:   s.StateKey(group),
		read: func(resp *clientv3.GetResponse) []GroupUpdate {
			if len(resp.Kvs) != 1 {
				return []GroupUpdate{{}}
			}
			return []GroupUpdate{s.groupUpdate(group, resp.Kvs[0].Value, resp.Kvs[0].ModRevision)}
		},
		event: func(ev *clientv3.Event) (GroupUpdate, bool) {
			if ev.Type != clientv3.EventTypePut {
				return GroupUpdate{Revision: ev.Kv.ModRevision}, true
			}
			return s.groupUpdate(group, ev.Kv.Value, ev.Kv.ModRevision), true
		},
	})
	return ch, nil
}

// feed is what follow reads and watches: a key (or a prefix, with
// clientv3.WithPrefix in both option lists), what a read delivers, and
// what an event delivers (false: skip it).
type feed[T any] struct {
	what, group, key   string
	getOpts, watchOpts []clientv3.OpOption
	read               func(*clientv3.GetResponse) []T
	event              func(*clientv3.Event) (T, bool)
}

// follow delivers f's read, then every event of a watch from the revision
// after it, until ctx ends, and closes ch. A failed read or watch starts
// again from a fresh read after retryDelay.
func follow[T any](ctx context.Context, s *Store, ch chan<- T, f feed[T]) {
	defer close(ch)
	for ctx.Err() == nil {
		resp, err := s.cli.Get(ctx, f.key, f.getOpts...)
		if err != nil {
			s.log.Debug("watch: read "+f.what, "group", f.group, "error", err)
			if !sleep(ctx, retryDelay) {
				return
			}
			continue
		}
		for _, u := range f.read(resp) {
			if !send(ctx, ch, u) {
				return
			}
		}
		if !watchFrom(ctx, s, ch, f, resp.Header.Revision+1) || !sleep(ctx, retryDelay) {
			return
		}
	}
}

// watchFrom delivers f's events from revision rev until the watch ends; it
// is false when ctx ended while delivering.
func watchFrom[T any](ctx context.Context, s *Store, ch chan<- T, f feed[T], rev int64) bool {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := append(append([]clientv3.OpOption(nil), f.watchOpts...), clientv3.WithRev(rev))
	for wr := range s.cli.Watch(wctx, f.key, opts...) {
		if err := wr.Err(); err != nil {
			s.log.Debug("watch of "+f.what+" ended", "group", f.group, "error", err)
			return true
		}
		for _, ev := range wr.Events {
			if u, ok := f.event(ev); ok && !send(ctx, ch, u) {
				return false
			}
		}
	}
	return true
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
	go follow(ctx, s, ch, feed[NodeUpdate]{
		what:      "registrations",
		group:     group,
		key:       prefix,
		getOpts:   []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithLimit(controller.MaxSetSize + 1)},
		watchOpts: []clientv3.OpOption{clientv3.WithPrefix()},
		read: func(resp *clientv3.GetResponse) []NodeUpdate {
			us := make([]NodeUpdate, 0, len(resp.Kvs))
			for _, kv := range resp.Kvs {
				if u, ok := s.nodeUpdate(group, prefix, kv.Key, kv.Value, kv.ModRevision, true); ok {
					us = append(us, u)
				}
			}
			return us
		},
		event: func(ev *clientv3.Event) (NodeUpdate, bool) {
			return s.nodeUpdate(group, prefix, ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision, ev.Type == clientv3.EventTypePut)
		},
	})
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
