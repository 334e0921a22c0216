package core

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/replicatorhq/replicator/core/epoch"
)

// newReplicaPair is two replicas without a role on one pipe transport:
// a (broker 1, "a:1", counting in reg) and b (broker 2, "b:1"), on their
// own stores ast and bst; the caller closes them.
func newReplicaPair(t *testing.T) (reg *prometheus.Registry, ast, bst *memStore, a, b *Replica) {
	tr := newPipeTransport()
	reg = prometheus.NewRegistry()
	ast, bst = newMemStore(1<<20), newMemStore(1<<20)
	a = newTestReplica(t, ast, tr, testEpochs(t), 1, "a:1", reg)
	b = newTestReplica(t, bst, tr, testEpochs(t), 2, "b:1", prometheus.NewRegistry())
	return reg, ast, bst, a, b
}

func newTestReplica(t *testing.T, st *memStore, tr *pipeTransport, ep *epoch.File, id int64, addr string, reg prometheus.Registerer) *Replica {
	t.Helper()
	log, _ := newTestLogger(t)
	r, err := NewReplica(ReplicaConfig{Store: st, Transport: tr, Epochs: ep, BrokerID: id, Logger: log, Registerer: reg,
		Master: MasterConfig{ListenAddr: addr, Role: SyncMaster}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// follow makes r a slave of addr and waits until its connection reaches
// TRANSFER; the returned channel receives once per later connection.
func follow(t *testing.T, r *Replica, addr string) <-chan struct{} {
	t.Helper()
	connected := make(chan struct{}, 8)
	r.OnConnect(func() { connected <- struct{}{} })
	if err := r.BecomeSlave(addr); err != nil {
		t.Fatal(err)
	}
	<-connected
	return connected
}

// TestReplicaRoleChanges: epochs (0 = last + 1, older refused, appended at
// the max offset), puts by role, OnConnect pushed at TRANSFER, a demote
// fences the master, and metrics keep their counts across re-creations on
// one registry.
func TestReplicaRoleChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, ast, bst, a, b := newReplicaPair(t)
		defer a.Close()
		defer b.Close()
		if _, err := a.Put(context.Background(), testMsg(10)); !errors.Is(err, ErrNotMaster) {
			t.Fatalf("put without a role: %v", err)
		}
		if ep, err := a.BecomeMaster(0); err != nil || ep != 1 {
			t.Fatalf("BecomeMaster(0) = %d, %v", ep, err)
		}
		if _, err := a.Put(context.Background(), testMsg(10)); err != nil {
			t.Fatal(err)
		}
		follow(t, b, "a:1")
		synctest.Wait()
		if _, err := b.Put(context.Background(), testMsg(10)); !errors.Is(err, ErrNotMaster) || !errors.Is(err, ErrSlaveWriteProtected) {
			t.Fatalf("put on a slave: %v", err)
		}
		if st := b.Status(); st.Role != RoleSlave || st.Epoch != 1 || st.Slave == nil || st.Slave.HAState != "TRANSFER" || st.MaxOffset != ast.Bounds().Max {
			t.Fatalf("slave status %+v %+v", st, st.Slave)
		}
		if st := a.Status(); st.Role != RoleMaster || len(st.Master.Slaves) != 1 || !st.Master.Slaves[0].InSync {
			t.Fatalf("master status %+v", st.Master)
		}
		// B is promoted; A demoted (fenced, then a slave of B).
		if _, err := b.BecomeMaster(1); !errors.Is(err, epoch.ErrNotNewer) {
			t.Fatalf("BecomeMaster of an old epoch: %v", err)
		}
		m := a.Master()
		if err := a.BecomeSlave("b:1"); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Put(context.Background(), testMsg(10)); !errors.Is(err, ErrFenced) {
			t.Fatalf("put on the demoted master: %v", err)
		}
		if ep, err := b.BecomeMaster(0); err != nil || ep != 2 {
			t.Fatalf("BecomeMaster = %d, %v", ep, err)
		}
		if e, _ := b.cfg.Epochs.Last(); e.StartOffset != bst.Bounds().Max {
			t.Fatalf("epoch 2 starts at %d, want the max offset %d", e.StartOffset, bst.Bounds().Max)
		}
		if _, err := b.Put(context.Background(), testMsg(10)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(DefaultReconnectDelay + time.Second) // A's first dial was refused: fake time
		synctest.Wait()
		if st := a.Status(); st.Role != RoleSlave || st.Epoch != 2 || st.MaxOffset != bst.Bounds().Max {
			t.Fatalf("demoted node %+v / %+v", st, st.Slave)
		}
		// A master again, on the same registry: counts survive.
		if _, err := a.BecomeMaster(0); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Put(context.Background(), testMsg(10)); err != nil {
			t.Fatal(err)
		}
		if got := testutil.ToFloat64(counterOf(t, reg, "replicator_ha_puts_total")); got != 2 {
			t.Fatalf("replicator_ha_puts_total %v across two masters, want 2", got)
		}
	})
}

// counterOf sums a metric family of reg into a gauge for testutil.
func counterOf(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sum"})
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			g.Add(m.GetCounter().GetValue())
		}
	}
	return g
}
