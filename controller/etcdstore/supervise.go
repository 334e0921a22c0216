package etcdstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/replicatorhq/replicator/controller"
)

// Supervise turns ended registrations into elections: it steps
// controller.LeaseExpired for every node key of group that etcd deletes
// (a lease that expired or was revoked), and, when it starts and after
// every watch that had to start again, for each master without a live
// registration (an expiry nobody was watching). group "" supervises every
// group under the prefix. decided, when not nil, gets every decision that
// changed a group (from several goroutines when Config.ElectionDelay is
// set: each expiry then waits that long before its step). A step that
// cannot be written is logged; a watch that fails starts again from a
// sweep, which finds a master whose expiry was not written. Supervise
// returns nil when ctx ends, after the delayed steps; its only error is an
// invalid group name.
//
// Any number of processes may supervise the same groups (the controller
// command, every node): a repeated expiry changes nothing, and the
// revision compare lets one election through.
func (s *Store) Supervise(ctx context.Context, group string, decided func(group string, d controller.Decision)) error {
	if group != "" {
		if err := ValidGroup(group); err != nil {
			return err
		}
	}
	root := s.prefix + "/groups/"
	watchKey := root
	if group != "" {
		watchKey = s.GroupPrefix(group)
	}
	step := func(g string, id int64) error {
		d, err := s.Step(ctx, g, controller.LeaseExpired{BrokerID: id})
		if err != nil {
			return err
		}
		if d.Changed && decided != nil {
			decided(g, d)
		}
		return nil
	}
	var pending sync.WaitGroup
	defer pending.Wait()
	expire := func(g string, id int64) error {
		if s.delay <= 0 {
			return step(g, id)
		}
		s.log.Debug("stepping a registration's end after the election delay", "group", g, "broker_id", id, "delay", s.delay)
		pending.Add(1)
		go func() {
			defer pending.Done()
			if !sleep(ctx, s.delay) {
				return
			}
			if err := step(g, id); err != nil && ctx.Err() == nil {
				s.log.Warn("supervise: stepping a lease expiry", "group", g, "broker_id", id, "error", err)
			}
		}()
		return nil
	}
	for ctx.Err() == nil {
		rev, err := s.sweep(ctx, group, expire)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("supervise: checking masters", "group", group, "error", err)
			}
			sleep(ctx, retryDelay)
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
	watch:
		for wr := range s.cli.Watch(wctx, watchKey, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithFilterPut()) {
			if err := wr.Err(); err != nil {
				s.log.Debug("supervise: watch ended", "group", group, "error", err)
				break
			}
			for _, ev := range wr.Events {
				g, id, ok := parseNodeKey(root, string(ev.Kv.Key))
				if !ok {
					continue
				}
				s.log.Debug("registration ended", "group", g, "broker_id", id)
				if err := expire(g, id); err != nil {
					// Start again from a sweep: it finds the master
					// whose expiry this step could not write.
					if ctx.Err() == nil {
						s.log.Warn("supervise: stepping a lease expiry", "group", g, "broker_id", id, "error", err)
					}
					break watch
				}
			}
		}
		cancel()
		sleep(ctx, retryDelay)
	}
	return nil
}

// sweep steps LeaseExpired for the master of each supervised group that
// has no live registration, and returns the revision it read at.
func (s *Store) sweep(ctx context.Context, group string, expire func(string, int64) error) (int64, error) {
	groups := []string{group}
	var rev int64
	if group == "" {
		root := s.prefix + "/groups/"
		resp, err := s.cli.Get(ctx, root, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return 0, fmt.Errorf("etcdstore: list groups: %w", err)
		}
		rev = resp.Header.Revision
		groups = groups[:0]
		seen := map[string]bool{}
		for _, kv := range resp.Kvs {
			g, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), root), "/")
			if !seen[g] && ValidGroup(g) == nil {
				seen[g] = true
				groups = append(groups, g)
			}
		}
	}
	for _, g := range groups {
		snap, err := s.Load(ctx, g)
		if err != nil {
			s.log.Warn("supervise: reading a group", "group", g, "error", err)
			continue
		}
		if group != "" {
			rev = snap.ReadRevision
		}
		m := snap.State.Group.Master
		if m != controller.NoMaster && !snap.State.Nodes[m].Alive {
			s.log.Info("master has no live registration", "group", g, "master", m)
			if err := expire(g, m); err != nil {
				return 0, err
			}
		}
	}
	return rev, nil
}

// parseNodeKey splits <root><group>/nodes/<id>.
func parseNodeKey(root, key string) (string, int64, bool) {
	rest, ok := strings.CutPrefix(key, root)
	if !ok {
		return "", 0, false
	}
	g, rest, ok := strings.Cut(rest, "/nodes/")
	if !ok || ValidGroup(g) != nil {
		return "", 0, false
	}
	id, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || id < 0 {
		return "", 0, false
	}
	return g, id, true
}
