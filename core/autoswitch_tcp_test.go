package core_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/core/epoch"
	"github.com/replicatorhq/replicator/plugins/commitlog"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/record"
)

// asNode is one data directory served by a core.Replica over real TCP.
type asNode struct {
	t   *testing.T
	dir string
	id  int64
	log *commitlog.Log
	ep  *epoch.File
	r   *core.Replica
	reg *prometheus.Registry
}

func openASNode(t *testing.T, dir string, id int64, reg *prometheus.Registry) *asNode {
	return openASNodeRole(t, dir, id, reg, core.AsyncMaster)
}

func openASNodeRole(t *testing.T, dir string, id int64, reg *prometheus.Registry, role core.Role) *asNode {
	t.Helper()
	n := &asNode{t: t, dir: dir, id: id, log: openLog(t, dir), reg: reg}
	var err error
	if n.ep, err = epoch.Open(dir); err != nil {
		t.Fatal(err)
	}
	n.r, err = core.NewReplica(core.ReplicaConfig{
		Store: n.log, Transport: tcptransport.New(tcptransport.DefaultOptions()), Epochs: n.ep, BrokerID: id,
		Master:     core.MasterConfig{ListenAddr: "127.0.0.1:0", HeartbeatInterval: 50 * time.Millisecond, Role: role},
		Slave:      core.SlaveConfig{ReconnectDelay: 20 * time.Millisecond, ReportInterval: 50 * time.Millisecond},
		Logger:     tlogger(t).Named("node" + string(rune('0'+id))),
		Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// close stops the replica and closes the log (a process stop).
func (n *asNode) close() {
	n.t.Helper()
	if err := n.r.Close(); err != nil {
		n.t.Fatal(err)
	}
	if err := n.log.Close(); err != nil {
		n.t.Fatal(err)
	}
}

func (n *asNode) addr() string { return n.r.Master().Addr() }

func (n *asNode) put(t *testing.T, from, count int) {
	t.Helper()
	for i := from; i < from+count; i++ {
		if _, err := n.r.Put(context.Background(), msg(i)); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
}

// waitMax polls (real processes of the same test, bounded) until n's log
// ends at want.
func (n *asNode) waitMax(t *testing.T, want int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for n.log.Bounds().Max != want {
		if time.Now().After(deadline) {
			t.Fatalf("node %d max %d, want %d; status %+v", n.id, n.log.Bounds().Max, want, n.r.Status().Slave)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sameLog checks that a and b hold the same bytes and every record decodes.
func sameLog(t *testing.T, a, b *asNode, wantRecords int) {
	t.Helper()
	ab, bb := a.log.Bounds(), b.log.Bounds()
	if ab.Max != bb.Max {
		t.Fatalf("max %d vs %d", ab.Max, bb.Max)
	}
	for off := int64(0); off < ab.Max; {
		va, err := a.log.Read(off, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		vb, err := b.log.Read(off, len(va.Data))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(va.Data, vb.Data[:len(va.Data)]) {
			t.Fatalf("logs differ in [%d, %d)", off, off+int64(len(va.Data)))
		}
		off += int64(len(va.Data))
		va.Release()
		vb.Release()
	}
	for _, n := range []*asNode{a, b} {
		if wantRecords < 0 {
			break
		}
		recs, err := countAll(n.log)
		if err != nil {
			t.Fatalf("node %d: %v", n.id, err)
		}
		if recs != wantRecords {
			t.Fatalf("node %d holds %d records, want %d", n.id, recs, wantRecords)
		}
	}
}

func countAll(l *commitlog.Log) (int, error) {
	n := 0
	b := l.Bounds()
	for off := b.Min; off < b.Max; {
		recs, next, err := l.ReadMessages(off, 256)
		if err != nil {
			return n, err
		}
		if next <= off {
			break
		}
		n += len(recs)
		off = next
	}
	return n, nil
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var v float64
			for _, m := range mf.GetMetric() {
				v += metricValue(m)
			}
			return v
		}
	}
	return 0
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

// divergence runs issue 14's scenario: M and S replicate 100 messages; S
// stops; M takes 50 more and stops; S becomes master of a new epoch and
// takes extra messages; M becomes S's slave: it must be cut back to the
// consistent point (the 50 unreplicated messages) and end byte-identical.
func divergence(t *testing.T, extra int) {
	mdir, sdir := t.TempDir(), t.TempDir()
	mreg, sreg := prometheus.NewRegistry(), prometheus.NewRegistry()
	m := openASNode(t, mdir, 1, mreg)
	s := openASNode(t, sdir, 2, sreg)
	if ep, err := m.r.BecomeMaster(0); err != nil || ep != 1 {
		t.Fatalf("BecomeMaster: %d, %v", ep, err)
	}
	connected := make(chan struct{}, 16)
	s.r.OnConnect(func() { connected <- struct{}{} })
	if err := s.r.BecomeSlave(m.addr()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-connected:
	case <-time.After(20 * time.Second):
		t.Fatal("no OnConnect")
	}
	m.put(t, 0, 100)
	common := m.log.Bounds().Max
	s.waitMax(t, common)
	if st := s.r.Status(); st.Role != core.RoleSlave || st.Epoch != 1 || st.EpochEntries != 1 {
		t.Fatalf("slave status %+v", st)
	}
	s.close()
	m.put(t, 100, 50)
	mOld := m.log.Bounds().Max
	m.close()

	s = openASNode(t, sdir, 2, sreg)
	defer s.close()
	if ep, err := s.r.BecomeMaster(0); err != nil || ep != 2 {
		t.Fatalf("S BecomeMaster: %d, %v", ep, err)
	}
	s.put(t, 1000, extra)

	m = openASNode(t, mdir, 1, mreg)
	defer m.close()
	if err := m.r.BecomeSlave(s.addr()); err != nil {
		t.Fatal(err)
	}
	s.waitMax(t, s.log.Bounds().Max)
	m.waitMax(t, s.log.Bounds().Max)
	sameLog(t, m, s, 100+extra)
	st := m.r.Status()
	tr := st.Slave.Truncated
	if tr == nil || tr.From != mOld || tr.To != common || tr.Bytes != mOld-common || tr.Records != 50 {
		t.Fatalf("truncation %+v, want from %d to %d, 50 records", tr, mOld, common)
	}
	if got := counterValue(t, mreg, "replicator_ha_truncated_bytes_total"); got != float64(mOld-common) {
		t.Fatalf("replicator_ha_truncated_bytes_total %v, want %d", got, mOld-common)
	}
	if st.Epoch != 2 || st.EpochEntries != 2 || st.Slave.Unhealthy != "" {
		t.Fatalf("old master's status %+v / %+v", st, st.Slave)
	}
	if es := m.ep.Entries(); es[1].StartOffset != common {
		t.Fatalf("epoch entries %+v, want epoch 2 at %d", es, common)
	}
}

func TestAutoSwitchDivergenceTCP(t *testing.T)             { divergence(t, 200) }
func TestAutoSwitchDivergenceLongerOldMaster(t *testing.T) { divergence(t, 10) }

// TestAutoSwitchNoConsistentPoint: a slave whose epochs share nothing with
// the master's refuses, says so in Status and a metric, and appends nothing.
func TestAutoSwitchNoConsistentPoint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := openASNode(t, t.TempDir(), 1, prometheus.NewRegistry())
	defer m.close()
	if _, err := m.r.BecomeMaster(3); err != nil {
		t.Fatal(err)
	}
	m.put(t, 0, 20)
	s := openASNode(t, t.TempDir(), 2, reg)
	defer s.close()
	if _, err := s.r.BecomeMaster(1); err != nil {
		t.Fatal(err)
	}
	s.put(t, 0, 5)
	before := s.log.Bounds().Max
	if err := s.r.BecomeSlave(m.addr()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for counterValue(t, reg, "replicator_ha_no_consistent_point_total") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no refusal counted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := s.r.Status().Slave
	if !strings.Contains(st.Unhealthy, "no consistent point") {
		t.Fatalf("Unhealthy %q", st.Unhealthy)
	}
	if got := s.log.Bounds().Max; got != before {
		t.Fatalf("slave max %d, want %d (nothing appended)", got, before)
	}
}

// TestAutoSwitchFailoverCyclesLoseNoPutOK: three nodes, sync puts from
// several producers, and repeated failovers done as a controller would
// (fence the master, promote a member of its in-sync set, point the others
// at it). Every message that got PUT_OK is in the final log of every node,
// and the three logs are byte-identical.
func TestAutoSwitchFailoverCyclesLoseNoPutOK(t *testing.T) {
	nodes := make([]*asNode, 3)
	for i := range nodes {
		nodes[i] = openASNodeRole(t, t.TempDir(), int64(i+1), prometheus.NewRegistry(), core.SyncMaster)
		defer nodes[i].close()
	}
	var (
		mu     sync.Mutex
		master = nodes[0]
		ok     = map[string]bool{}
	)
	waitSet := func(m *asNode, n int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for len(m.r.Status().Master.SyncStateSet) < n {
			if time.Now().After(deadline) {
				t.Fatalf("in-sync set %v, want %d members", m.r.Status().Master.SyncStateSet, n)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	if _, err := master.r.BecomeMaster(0); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes[1:] {
		if err := n.r.BecomeSlave(master.addr()); err != nil {
			t.Fatal(err)
		}
	}
	waitSet(master, 3)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				m := master
				mu.Unlock()
				id := fmt.Sprintf("p%d-%d", p, i)
				res, err := m.r.Put(context.Background(), &record.Message{Topic: "TopicTest", Body: []byte(id)})
				if err == nil && res.Status == core.PutOK {
					mu.Lock()
					ok[id] = true
					mu.Unlock()
				}
			}
		}()
	}
	for cycle := 1; cycle <= 4; cycle++ {
		time.Sleep(30 * time.Millisecond)
		mu.Lock()
		old := master
		mu.Unlock()
		old.r.Fence(errors.New("failover"))
		set := old.r.Status().Master.SyncStateSet
		var next *asNode
		for _, n := range nodes {
			if n != old && slices.Contains(set, n.id) {
				next = n
				break
			}
		}
		if next == nil {
			t.Fatalf("cycle %d: no in-sync member to promote in %v", cycle, set)
		}
		// The new master must hold what the old one confirmed.
		for deadline := time.Now().Add(20 * time.Second); next.log.Bounds().Max < old.r.ConfirmOffset(); {
			if time.Now().After(deadline) {
				t.Fatalf("cycle %d: node %d below the confirm offset", cycle, next.id)
			}
			time.Sleep(time.Millisecond)
		}
		if _, err := next.r.BecomeMaster(0); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		master = next
		mu.Unlock()
		for _, n := range nodes {
			if n != next {
				if err := n.r.BecomeSlave(next.addr()); err != nil {
					t.Fatal(err)
				}
			}
		}
		waitSet(next, 3)
	}
	close(stop)
	wg.Wait()
	final := master.log.Bounds().Max
	for _, n := range nodes {
		n.waitMax(t, final)
	}
	sameLog(t, nodes[0], nodes[1], -1)
	sameLog(t, nodes[1], nodes[2], -1)
	have := map[string]bool{}
	b := master.log.Bounds()
	for off := b.Min; off < b.Max; {
		recs, next, err := master.log.ReadMessages(off, 256)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			have[string(r.Body)] = true
		}
		if next <= off {
			break
		}
		off = next
	}
	if len(ok) < 50 {
		t.Fatalf("only %d PUT_OK messages: the load did not run", len(ok))
	}
	for id := range ok {
		if !have[id] {
			t.Fatalf("PUT_OK message %s lost", id)
		}
	}
	t.Logf("%d PUT_OK messages over 4 failovers, %d records in the final log", len(ok), len(have))
}
