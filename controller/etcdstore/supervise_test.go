package etcdstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/controller"
)

type decision struct {
	group string
	d     controller.Decision
}

// supervise runs s.Supervise until the test ends.
func supervise(t *testing.T, s *Store, group string) <-chan decision {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan decision, 16)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.Supervise(ctx, group, func(g string, d controller.Decision) { ch <- decision{g, d} }); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return ch
}

// registerOwn registers node on a client of its own, returned so that
// closing it plays the node's process dying.
func registerOwn(t *testing.T, prefix, group string, node controller.Node) (*Registration, func()) {
	t.Helper()
	cli := newClient(t)
	s := newStore(t, cli, nil)
	s.prefix = prefix
	r, _, err := s.Register(ctxT(t), group, node, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return r, func() { cli.Close() }
}

func TestSuperviseElectsOnMasterExpiry(t *testing.T) {
	ctx := ctxT(t)
	s := newStore(t, newClient(t), nil)
	_, kill1 := registerOwn(t, s.prefix, "g", controller.Node{BrokerID: 1})
	r2, _ := registerOwn(t, s.prefix, "g", controller.Node{BrokerID: 2})
	r3, _ := registerOwn(t, s.prefix, "g", controller.Node{BrokerID: 3})
	if _, err := s.Confirmer("g", 1).Propose(ctx, 1, []int64{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Update(ctx, 1, 200); err != nil {
		t.Fatal(err)
	}
	if _, err := r3.Update(ctx, 1, 300); err != nil {
		t.Fatal(err)
	}
	decided := supervise(t, s, "g")
	kill1()
	select {
	case got := <-decided:
		if got.group != "g" || got.d.Outcome != controller.Elected || got.d.Master != 3 || got.d.MasterEpoch != 2 {
			t.Fatalf("decision: %+v", got)
		}
	case <-ctx.Done():
		t.Fatal("no election after the master's lease expired")
	}
	// A slave's expiry changes nothing persisted: no decision.
	if err := r2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Load(ctx, "g")
	if err != nil || snap.State.Group.Master != 3 {
		t.Fatalf("after slave left: %+v %v", snap.State.Group, err)
	}
	select {
	case got := <-decided:
		t.Fatalf("unexpected decision %+v", got)
	default:
	}
}

func TestSuperviseSweepsUnwatchedExpiry(t *testing.T) {
	ctx := ctxT(t)
	s := newStore(t, newClient(t), nil)
	_, kill1 := registerOwn(t, s.prefix, "h", controller.Node{BrokerID: 1})
	registerOwn(t, s.prefix, "h", controller.Node{BrokerID: 2})
	if _, err := s.Confirmer("h", 1).Propose(ctx, 1, []int64{1, 2}); err != nil {
		t.Fatal(err)
	}
	// A group whose master lives: the sweep leaves it alone.
	registerOwn(t, s.prefix, "other", controller.Node{BrokerID: 5})
	kill1()
	// Nobody watches while the lease expires.
	for {
		snap, err := s.Load(ctx, "h")
		if err != nil {
			t.Fatal(err)
		}
		if !snap.State.Nodes[1].Alive {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("lease of node 1 never expired")
		case <-time.After(50 * time.Millisecond):
		}
	}
	decided := supervise(t, s, "")
	select {
	case got := <-decided:
		if got.group != "h" || got.d.Outcome != controller.Elected || got.d.Master != 2 || got.d.MasterEpoch != 2 {
			t.Fatalf("decision: %+v", got)
		}
	case <-ctx.Done():
		t.Fatal("the sweep did not elect")
	}
	if snap, err := s.Load(ctx, "other"); err != nil || snap.State.Group.Master != 5 || snap.State.Group.MasterEpoch != 1 {
		t.Fatalf("other group: %+v %v", snap.State.Group, err)
	}
}

func TestParseNodeKey(t *testing.T) {
	for key, want := range map[string]struct {
		g  string
		id int64
		ok bool
	}{
		"/r/groups/g/nodes/12":  {"g", 12, true},
		"/r/groups/g/state":     {ok: false},
		"/r/groups/g/nodes/-1":  {ok: false},
		"/r/groups/g/nodes/x":   {ok: false},
		"/x/groups/g/nodes/1":   {ok: false},
		"/r/groups/a b/nodes/1": {ok: false},
	} {
		g, id, ok := parseNodeKey("/r/groups/", key)
		if ok != want.ok || (ok && (g != want.g || id != want.id)) {
			t.Errorf("%s: %q %d %v, want %+v", key, g, id, ok, want)
		}
	}
}

// TestSuperviseElectionDelay: with an election delay, the election comes
// that long after the registration ended, not at once.
func TestSuperviseElectionDelay(t *testing.T) {
	ctx := ctxT(t)
	s := newStore(t, newClient(t), nil)
	s.delay = 1500 * time.Millisecond
	_, kill1 := registerOwn(t, s.prefix, "g", controller.Node{BrokerID: 1})
	registerOwn(t, s.prefix, "g", controller.Node{BrokerID: 2})
	if _, err := s.Confirmer("g", 1).Propose(ctx, 1, []int64{1, 2}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nodes, err := s.WatchNodes(wctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	decided := supervise(t, s, "g")
	kill1()
	for gone := false; !gone; {
		select {
		case u := <-nodes:
			gone = u.BrokerID == 1 && !u.Alive
		case <-ctx.Done():
			t.Fatal("lease of node 1 never expired")
		}
	}
	if snap, err := s.Load(ctx, "g"); err != nil || snap.State.Group.Master != 1 {
		t.Fatalf("elected before the delay: %+v %v", snap.State.Group, err)
	}
	select {
	case got := <-decided:
		if got.d.Outcome != controller.Elected || got.d.Master != 2 {
			t.Fatalf("decision: %+v", got)
		}
	case <-ctx.Done():
		t.Fatal("no election after the delay")
	}
}
