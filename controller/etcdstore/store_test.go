package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/replicatorhq/replicator/controller"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/testlog"
)

// The confirmer plugs into core's master.
var _ core.SyncStateSetConfirmer = (*Confirmer)(nil)

func newClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// prefixes holds each test's key prefix: the stores of one test share it,
// and a test run again (-count) gets a fresh one, so no state is left
// from the run before in the shared etcd.
var (
	prefixes  sync.Map // *testing.T → string
	prefixSeq atomic.Int64
)

func testPrefix(t *testing.T) string {
	p, _ := prefixes.LoadOrStore(t, fmt.Sprintf("/test-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), prefixSeq.Add(1)))
	return p.(string)
}

func newStore(t *testing.T, cli *clientv3.Client, reg prometheus.Registerer) *Store {
	t.Helper()
	s, err := New(Config{Client: cli, Prefix: testPrefix(t), Registerer: reg,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: testlog.Writer(t)})})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRegisterAndLeaseExpiry(t *testing.T) {
	ctx := ctxT(t)
	s := newStore(t, newClient(t), nil)
	// Node 1 runs on a client of its own: closing that client is the
	// process dying (no revoke; the lease must expire by itself).
	c1 := newClient(t)
	s1 := newStore(t, c1, nil)
	r1, d, err := s1.Register(ctx, "g", controller.Node{BrokerID: 1, HAAddr: "127.0.0.1:1"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d.Outcome != controller.Elected || d.Master != 1 || d.MasterEpoch != 1 {
		t.Fatalf("first registration: %+v", d)
	}
	r2, d, err := s.Register(ctx, "g", controller.Node{BrokerID: 2}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close(context.Background())
	if d.Outcome != controller.Noted || d.Master != 1 {
		t.Fatalf("second registration: %+v", d)
	}
	if _, _, err := s.Register(ctx, "g", controller.Node{BrokerID: 2}, time.Second); !errors.Is(err, ErrAlreadyRegistered) {
		t.Fatalf("duplicate registration: %v", err)
	}
	if set, err := s.Confirmer("g", 1).Propose(ctx, 1, []int64{1, 2}); err != nil || !slices.Equal(set, []int64{1, 2}) {
		t.Fatalf("propose: %v %v", set, err)
	}
	if _, err := r2.Update(ctx, 1, 4096); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Load(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if n := snap.State.Nodes[2]; !n.Alive || n.Epoch != 1 || n.MaxOffset != 4096 {
		t.Fatalf("node 2 after update: %+v", n)
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nodes, err := s.WatchNodes(wctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	c1.Close()
	select {
	case <-r1.Lost():
	case <-ctx.Done():
		t.Fatal("registration of a closed client not lost")
	}
	for expired := false; !expired; {
		select {
		case u := <-nodes:
			expired = u.BrokerID == 1 && !u.Alive
		case <-ctx.Done():
			t.Fatal("lease of node 1 never expired")
		}
	}
	snap, err = s.Load(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := snap.State.Nodes[1]; !ok || n.Alive {
		t.Fatalf("expired master should appear dead: %+v %v", n, ok)
	}
	d, err = s.Step(ctx, "g", controller.LeaseExpired{BrokerID: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d.Outcome != controller.Elected || d.Master != 2 || d.MasterEpoch != 2 || !slices.Equal(d.Set, []int64{2}) {
		t.Fatalf("election after expiry: %+v", d)
	}
	// The same event stepped again (another watcher) changes nothing.
	if d, err = s.Step(ctx, "g", controller.LeaseExpired{BrokerID: 1}); err != nil || d.Changed || d.MasterEpoch != 2 {
		t.Fatalf("repeated expiry: %+v %v", d, err)
	}
}

func TestUpdateAfterLeaseLost(t *testing.T) {
	ctx := ctxT(t)
	s := newStore(t, newClient(t), nil)
	r, _, err := s.Register(ctx, "g", controller.Node{BrokerID: 7}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.cli.Revoke(ctx, clientv3.LeaseID(r.LeaseID())); err != nil {
		t.Fatal(err)
	}
	<-r.Lost()
	if _, err := r.Update(ctx, 1, 10); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("update after revoke: %v", err)
	}
	r.Close(ctx) // revoking again fails harmlessly
}

// TestLostRaceReSteps makes a second writer change the group between a
// step's read and its write: the write must fail its revision compare,
// and the step must read again and step the machine on the new state.
func TestLostRaceReSteps(t *testing.T) {
	ctx := ctxT(t)
	reg := prometheus.NewRegistry()
	a := newStore(t, newClient(t), reg)
	b := newStore(t, newClient(t), nil)
	b.prefix = a.prefix
	var regs []*Registration
	for id := int64(1); id <= 3; id++ {
		r, _, err := a.Register(ctx, "g", controller.Node{BrokerID: id, MaxOffset: 100 * id}, 0)
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, r)
	}
	defer func() {
		for _, r := range regs[1:] {
			r.Close(context.Background())
		}
	}()
	if _, err := a.Confirmer("g", 1).Propose(ctx, 1, []int64{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if err := regs[0].Close(ctx); err != nil { // the master goes away
		t.Fatal(err)
	}
	calls := 0
	d, err := a.step(ctx, "g", func(st controller.State) controller.Event {
		calls++
		if calls == 1 {
			// b elects first, between a's read and a's write.
			bd, err := b.Step(ctx, "g", controller.LeaseExpired{BrokerID: 1})
			if err != nil || bd.Outcome != controller.Elected || bd.Master != 3 || bd.MasterEpoch != 2 {
				t.Errorf("b's election: %+v %v", bd, err)
			}
			if st.Group.Master != 1 {
				t.Errorf("a read master %d", st.Group.Master)
			}
		}
		return controller.LeaseExpired{BrokerID: 1}
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("stepped %d times, want 2 (one lost race)", calls)
	}
	if d.Outcome != controller.Noted || d.Changed || d.Master != 3 || d.MasterEpoch != 2 {
		t.Fatalf("a's step after the lost race: %+v (want b's master 3 at epoch 2 kept)", d)
	}
	if got := testutil.ToFloat64(a.met.conflicts); got != 1 {
		t.Fatalf("conflicts metric %v, want 1", got)
	}
}

// TestConcurrentElections races many writers on one master loss: exactly
// one election happens, at epoch + 1.
func TestConcurrentElections(t *testing.T) {
	ctx := ctxT(t)
	s := newStore(t, newClient(t), nil)
	var regs []*Registration
	for id := int64(1); id <= 3; id++ {
		r, _, err := s.Register(ctx, "g", controller.Node{BrokerID: id}, 0)
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, r)
	}
	defer func() {
		for _, r := range regs[1:] {
			r.Close(context.Background())
		}
	}()
	if _, err := s.Confirmer("g", 1).Propose(ctx, 1, []int64{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	regs[0].Close(ctx)
	var elected atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		st := newStore(t, newClient(t), nil)
		st.prefix = s.prefix
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := st.Step(ctx, "g", controller.LeaseExpired{BrokerID: 1})
			if err != nil {
				t.Error(err)
				return
			}
			if d.Outcome == controller.Elected {
				elected.Add(1)
			}
			if d.Master != 2 || d.MasterEpoch != 2 {
				t.Errorf("writer sees master %d at epoch %d, want 2 at 2", d.Master, d.MasterEpoch)
			}
		}()
	}
	wg.Wait()
	if elected.Load() != 1 {
		t.Fatalf("%d elections, want exactly 1", elected.Load())
	}
}

func TestWatchDeliversChanges(t *testing.T) {
	ctx := ctxT(t)
	s := newStore(t, newClient(t), nil)
	wctx, cancel := context.WithCancel(ctx)
	updates, err := s.Watch(wctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	next := func() GroupUpdate {
		t.Helper()
		select {
		case u := <-updates:
			return u
		case <-ctx.Done():
			t.Fatal("no update")
		}
		return GroupUpdate{}
	}
	if u := next(); u.Exists {
		t.Fatalf("initial: %+v", u)
	}
	r1, _, err := s.Register(ctx, "g", controller.Node{BrokerID: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close(context.Background())
	if u := next(); !u.Exists || u.Group.Master != 1 || u.Group.MasterEpoch != 1 {
		t.Fatalf("after election: %+v", u)
	}
	r2, _, err := s.Register(ctx, "g", controller.Node{BrokerID: 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close(context.Background())
	if _, err := s.Confirmer("g", 1).Propose(ctx, 1, []int64{1, 2}); err != nil {
		t.Fatal(err)
	}
	if u := next(); !slices.Equal(u.Group.SyncStateSet, []int64{1, 2}) || u.Group.SyncStateSetEpoch != 2 {
		t.Fatalf("after set change: %+v", u)
	}
	// A malformed value is delivered as an error, then the watch goes on.
	if _, err := s.cli.Put(ctx, s.StateKey("g"), "{garbage"); err != nil {
		t.Fatal(err)
	}
	if u := next(); !errors.Is(u.Err, controller.ErrCorrupt) {
		t.Fatalf("after garbage: %+v", u)
	}
	if _, err := s.Load(ctx, "g"); !errors.Is(err, controller.ErrCorrupt) {
		t.Fatalf("load of a corrupt group: %v", err)
	}
	if n, err := s.DeleteGroup(ctx, "g"); err != nil || n != 3 {
		t.Fatalf("delete: %d %v (want 3 keys: state and two nodes)", n, err)
	}
	if u := next(); u.Exists {
		t.Fatalf("after delete: %+v", u)
	}
	cancel()
	for range updates {
	}
}

func TestDeleteGroupAndBadInput(t *testing.T) {
	ctx := ctxT(t)
	s := newStore(t, newClient(t), nil)
	r, _, err := s.Register(ctx, "keep", controller.Node{BrokerID: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	r2, _, err := s.Register(ctx, "drop", controller.Node{BrokerID: 1, Epoch: 5}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close(context.Background())
	// A malformed registration is skipped, not fatal.
	if _, err := s.cli.Put(ctx, s.NodeKey("drop", 9), `{"broker_id":8}`); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Load(ctx, "drop")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.State.Nodes[9]; ok || snap.State.Group.MasterEpoch != 6 {
		t.Fatalf("load: %+v", snap.State)
	}
	if _, err := s.DeleteGroup(ctx, "drop"); err != nil {
		t.Fatal(err)
	}
	snap, err = s.Load(ctx, "drop")
	if err != nil || snap.Revision != 0 || len(snap.State.Nodes) != 0 {
		t.Fatalf("after delete: %+v %v", snap, err)
	}
	if snap, err := s.Load(ctx, "keep"); err != nil || snap.State.Group.Master != 1 {
		t.Fatalf("other group touched: %+v %v", snap, err)
	}
	for _, g := range []string{"", "a/b", "..", strings.Repeat("x", 129), "sp ace"} {
		if _, err := s.Load(ctx, g); !errors.Is(err, ErrBadGroup) {
			t.Errorf("group %q: %v", g, err)
		}
	}
	if _, _, err := s.Register(ctx, "keep", controller.Node{BrokerID: -1}, 0); !errors.Is(err, controller.ErrBadBrokerID) {
		t.Fatalf("negative id: %v", err)
	}
}

func TestConfirmerRejections(t *testing.T) {
	ctx := ctxT(t)
	s := newStore(t, newClient(t), nil)
	for id := int64(1); id <= 2; id++ {
		r, _, err := s.Register(ctx, "g", controller.Node{BrokerID: id}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())
	}
	if _, err := s.Confirmer("g", 1).Propose(ctx, 0, []int64{1, 2}); !errors.Is(err, controller.ErrStaleMasterEpoch) {
		t.Fatalf("stale epoch: %v", err)
	}
	if _, err := s.Confirmer("g", 2).Propose(ctx, 1, []int64{1, 2}); !errors.Is(err, controller.ErrNotMaster) {
		t.Fatalf("non-master: %v", err)
	}
	if _, err := s.Confirmer("g", 1).Propose(ctx, 1, []int64{2}); !errors.Is(err, controller.ErrSetWithoutMaster) {
		t.Fatalf("set without master: %v", err)
	}
	if set, err := s.Confirmer("g", 1).Propose(ctx, 1, []int64{1}); err != nil || !slices.Equal(set, []int64{1}) {
		t.Fatalf("unchanged set: %v %v", set, err)
	}
}

func TestLeaseSeconds(t *testing.T) {
	for in, want := range map[time.Duration]int64{0: 3, time.Millisecond: 1, time.Second: 1, 1500 * time.Millisecond: 2, 10 * time.Second: 10} {
		if got := leaseSeconds(in); got != want {
			t.Errorf("%v: %d, want %d", in, got, want)
		}
	}
}
