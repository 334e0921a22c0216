package faults

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/internal/proctest"
)

// ctlScenario is one fault of the controller-mode suite: inject runs one
// cycle on a healthy group whose master is m and returns a note for the
// cycle's log line.
type ctlScenario struct {
	name string
	// etcd is the number of controller members.
	etcd   int
	inject func(g *group, p *cproducer, m master, cycle int) string
}

var ctlScenarios = []ctlScenario{
	{"kill-master", 1, killMasterCycle},
	{"pause-master", 1, pauseMasterCycle},
	{"partition-master-etcd", 1, partitionEtcdCycle},
	{"partition-master-slaves", 1, partitionSlavesCycle},
	{"isolate-master", 1, isolateMasterCycle},
	{"kill-etcd-leader", 3, killEtcdLeaderCycle},
}

// TestControllerFaults: a controller-mode group (three `replicator node`
// processes, sync replication, `replicator controller` as one etcd member,
// or three for the etcd-leader scenario) takes puts from concurrent
// producers while one fault is injected per cycle: kill -9 of the master
// (restarted later: it rejoins as a slave), SIGSTOP of the master past
// the lease TTL (then SIGCONT), a partition between the master and etcd,
// between the master and its slaves, both at once, and kill -9 of etcd's
// leader. After each cycle every put acknowledged so far must be on the
// new master at its offset; at the end the nodes must hold byte-identical
// logs and the history must pass package history's checks (no loss, no
// offset acknowledged twice, one master per epoch, no stale master, a
// linearizable append-only log).
func TestControllerFaults(t *testing.T) {
	t.Parallel()
	for _, sc := range ctlScenarios {
		for _, seed := range seeds(t) {
			t.Run(fmt.Sprintf("%s/seed=%d", sc.name, seed), func(t *testing.T) {
				t.Parallel()
				runScenario(t, sc, seed, ctlCycles())
			})
		}
	}
}

func runScenario(t *testing.T, sc ctlScenario, seed uint64, cycles int) {
	start := time.Now()
	g := newGroup(t, seed, sc.etcd)
	p := startCProducer(t, seed, g.apis(), ctlWorkers)
	p.waitOKs(t, 20)
	checked := 0
	for c := range cycles {
		m := g.waitHealthy(fmt.Sprintf("before cycle %d", c))
		p.waitOKs(t, 10+g.rng.IntN(60))
		t0 := time.Now()
		note := sc.inject(g, p, m, c)
		t1 := time.Now()
		m = g.waitHealthy(fmt.Sprintf("after cycle %d", c))
		p.waitOKs(t, 5)
		t2 := time.Now()
		checked = g.checkCycle(p, c, m)
		t.Logf("cycle %d: %s (%s); healthy again after %s; master now %d epoch %d; %d acknowledged puts on it (checked in %s)",
			c, note, t1.Sub(t0).Round(time.Millisecond), t2.Sub(t1).Round(time.Millisecond), m.n.id, m.st.Epoch, checked, time.Since(t2).Round(time.Millisecond))
	}
	g.finish(p, cycles, start, "")
}

// faultPause is a random pause of the fault's timing, up to max.
func (g *group) faultPause(max time.Duration) {
	time.Sleep(time.Duration(g.rng.Int64N(int64(max))))
}

// killMasterCycle: kill -9 of the master with puts in flight; another
// in-sync member is elected; the old master restarts on its data a
// little later and rejoins as a slave, cutting what the new master does
// not hold.
func killMasterCycle(g *group, p *cproducer, m master, c int) string {
	m.n.p.Kill()
	nm := g.waitMaster(fmt.Sprintf("cycle %d: a new master after kill -9 of %d", c, m.n.id), m.st.Epoch)
	p.waitOKs(g.t, 5+g.rng.IntN(30))
	m.n.p.Restart()
	return fmt.Sprintf("killed master %d (epoch %d), elected %d (epoch %d)", m.n.id, m.st.Epoch, nm.n.id, nm.st.Epoch)
}

// pauseMasterCycle: SIGSTOP of the master until another node is elected
// (past the lease TTL and the election delay), then SIGCONT. The resumed
// master must not acknowledge a put it was given before the pause: its
// lease ended while it was stopped.
func pauseMasterCycle(g *group, p *cproducer, m master, c int) string {
	stopAt := p.rec.Now()
	m.n.p.Signal(syscall.SIGSTOP)
	nm := g.waitMaster(fmt.Sprintf("cycle %d: a new master while %d is stopped", c, m.n.id), m.st.Epoch)
	p.waitOKs(g.t, 5)
	g.faultPause(time.Second)
	contAt := p.rec.Now()
	m.n.p.Signal(syscall.SIGCONT)
	g.pauses = append(g.pauses, pause{broker: m.n.id, epoch: m.st.Epoch, cont: contAt})
	return fmt.Sprintf("stopped master %d (epoch %d) for %s, elected %d (epoch %d)", m.n.id, m.st.Epoch,
		time.Duration(contAt-stopAt).Round(time.Millisecond), nm.n.id, nm.st.Epoch)
}

func kind(hard bool) string {
	if hard {
		return "hard"
	}
	return "silent"
}

// partitionEtcdCycle: the master loses etcd (its proxy to the controller
// is cut): it fences itself at half the TTL, its lease expires, another
// node is elected; after healing the old master rejoins as a slave.
func partitionEtcdCycle(g *group, p *cproducer, m master, c int) string {
	hard := g.rng.IntN(2) == 0
	m.n.etcdProxy.cut(hard)
	nm := g.waitMaster(fmt.Sprintf("cycle %d: a new master while %d is cut from etcd", c, m.n.id), m.st.Epoch)
	p.waitOKs(g.t, 5+g.rng.IntN(30))
	m.n.etcdProxy.heal()
	return fmt.Sprintf("cut master %d (epoch %d) from etcd (%s), elected %d (epoch %d)", m.n.id, m.st.Epoch, kind(hard), nm.n.id, nm.st.Epoch)
}

// partitionSlavesCycle: the slaves lose the master (its HA listener's
// proxy is cut). The master keeps its lease: sync puts wait, then the
// master shrinks its in-sync set through etcd and acknowledges alone;
// after healing the slaves catch up and rejoin the set.
func partitionSlavesCycle(g *group, p *cproducer, m master, c int) string {
	hard := g.rng.IntN(2) == 0
	t0 := time.Now()
	m.n.haProxy.cut(hard)
	t1 := time.Now()
	proctest.Eventually(g.t, fmt.Sprintf("cycle %d: master %d alone in its in-sync set", c, m.n.id), proctest.WaitTimeout, func() error {
		st, err := getStatus(m.n.p.API)
		if err != nil {
			return err
		}
		if len(st.InSync) != 1 {
			return fmt.Errorf("in-sync set %v, role %s epoch %d", st.InSync, st.Role, st.Epoch)
		}
		return nil
	})
	t2 := time.Now()
	p.waitOKs(g.t, 5+g.rng.IntN(30))
	t3 := time.Now()
	m.n.haProxy.heal()
	return fmt.Sprintf("cut master %d (epoch %d) from its slaves (%s; cut %s, alone after %s, puts %s, heal %s)", m.n.id, m.st.Epoch, kind(hard),
		t1.Sub(t0).Round(time.Millisecond), t2.Sub(t1).Round(time.Millisecond), t3.Sub(t2).Round(time.Millisecond), time.Since(t3).Round(time.Millisecond))
}

// isolateMasterCycle: the master loses etcd and its slaves at once (the
// classic split brain: a master that still takes puts while the others
// elect). It cannot shrink its in-sync set without etcd, so its puts
// are never PUT_OK; a slave is elected; after healing it rejoins.
func isolateMasterCycle(g *group, p *cproducer, m master, c int) string {
	hard := g.rng.IntN(2) == 0
	m.n.haProxy.cut(hard)
	m.n.etcdProxy.cut(hard)
	nm := g.waitMaster(fmt.Sprintf("cycle %d: a new master while %d is isolated", c, m.n.id), m.st.Epoch)
	p.waitOKs(g.t, 5+g.rng.IntN(30))
	m.n.etcdProxy.heal()
	m.n.haProxy.heal()
	return fmt.Sprintf("isolated master %d (epoch %d, %s), elected %d (epoch %d)", m.n.id, m.st.Epoch, kind(hard), nm.n.id, nm.st.Epoch)
}

// killEtcdLeaderCycle: kill -9 of the controller's etcd leader (three
// members); the others elect a leader and the group goes on (a failover
// of the group may or may not follow); the member restarts later.
func killEtcdLeaderCycle(g *group, p *cproducer, m master, c int) string {
	var li int
	proctest.Eventually(g.t, "etcd's leader", proctest.WaitTimeout, func() error {
		var err error
		li, err = etcdLeader(g.etcd)
		return err
	})
	old := g.etcd[li]
	old.p.Kill()
	var ni int
	proctest.Eventually(g.t, fmt.Sprintf("cycle %d: a new etcd leader after kill -9 of %s", c, old.name), proctest.WaitTimeout, func() error {
		var err error
		ni, err = etcdLeader(g.etcd)
		return err
	})
	p.waitOKs(g.t, 10+g.rng.IntN(30))
	old.p.Restart()
	return fmt.Sprintf("killed etcd leader %s, %s leads", old.name, g.etcd[ni].name)
}
