package member

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/replicatorhq/replicator/controller"
	"github.com/replicatorhq/replicator/controller/etcdstore"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/core/epoch"
	"github.com/replicatorhq/replicator/internal/freeport"
	"github.com/replicatorhq/replicator/internal/testlog"
	"github.com/replicatorhq/replicator/plugins/commitlog"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/record"
)

// The tests' lease: etcd's shortest with the package's etcd (1 s); the
// supervisors wait electionDelay more after an expiry.
const (
	testTTL       = time.Second
	electionDelay = 300 * time.Millisecond
)

func openLog(t testing.TB, dir string) *commitlog.Log {
	t.Helper()
	opts := commitlog.DefaultOptions()
	opts.SegmentSize = 256 << 10
	opts.Prefault = false
	l, err := commitlog.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func testLogger(t testing.TB, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Info, Output: testlog.Writer(t), DisableTime: true})
}

// freeAddr returns a loopback address with a port free right now (the HA
// address must be fixed: it is registered before the listener exists).
func freeAddr(t *testing.T) string {
	t.Helper()
	a, err := freeport.Addrs(1)
	if err != nil {
		t.Fatal(err)
	}
	return a[0]
}

var runs atomic.Int64

// cluster is one group of members, each with its own etcd client (as
// separate processes would have).
type cluster struct {
	t      *testing.T
	prefix string
	reg    *prometheus.Registry

	mu    sync.Mutex
	nodes map[int64]*testNode
}

func newCluster(t *testing.T) *cluster {
	// A prefix of its own per run: -count=N reuses the package's etcd.
	prefix := fmt.Sprintf("/test-%s-%d", t.Name(), runs.Add(1))
	return &cluster{t: t, prefix: prefix, reg: prometheus.NewRegistry(), nodes: map[int64]*testNode{}}
}

type testNode struct {
	id      int64
	dir, ha string
	log     *commitlog.Log
	cli     *clientv3.Client
	m       *Member
	cancel  context.CancelFunc
	done    chan error
	stopped bool

	rmu   sync.Mutex
	roles []RoleChange // Config.OnRoleChange
}

func (c *cluster) client(endpoint string) *clientv3.Client {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.5, MaxDelay: 100 * time.Millisecond},
			MinConnectTimeout: 500 * time.Millisecond})}})
	if err != nil {
		c.t.Fatal(err)
	}
	return cli
}

func (c *cluster) store(cli *clientv3.Client, name string) *etcdstore.Store {
	c.t.Helper()
	s, err := etcdstore.New(etcdstore.Config{Client: cli, Prefix: c.prefix, ElectionDelay: electionDelay,
		Logger: testLogger(c.t, name), Registerer: c.reg})
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

// start runs member id on dir (kept across restarts) with its HA address
// ha, through endpoint (etcd or a proxy in front of it).
func (c *cluster) start(id int64, dir, ha, endpoint string) *testNode {
	t := c.t
	t.Helper()
	n := &testNode{id: id, dir: dir, ha: ha, log: openLog(t, dir), done: make(chan error, 1)}
	ep, err := epoch.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	n.cli = c.client(endpoint)
	name := fmt.Sprintf("node%d", id)
	n.m, err = New(Config{
		Replica: core.ReplicaConfig{Store: n.log, Transport: tcptransport.New(tcptransport.DefaultOptions()), Epochs: ep,
			Master: core.MasterConfig{ListenAddr: ha, Role: core.SyncMaster, HeartbeatInterval: 50 * time.Millisecond,
				SlaveTimeout: 3 * time.Second, CheckSyncStateSetPeriod: 200 * time.Millisecond},
			Slave: core.SlaveConfig{ReconnectDelay: 20 * time.Millisecond, ReportInterval: 50 * time.Millisecond}},
		Store: c.store(n.cli, name), Group: "g", BrokerID: id, APIAddr: fmt.Sprintf("127.0.0.1:%d", 8000+id),
		LeaseTTL: testTTL, Supervise: true, Logger: testLogger(t, name), Registerer: c.reg,
		OnRoleChange: func(rc RoleChange) {
			n.rmu.Lock()
			n.roles = append(n.roles, rc)
			n.rmu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- n.m.Run(ctx) }()
	c.mu.Lock()
	c.nodes[id] = n
	c.mu.Unlock()
	t.Cleanup(func() { c.stop(n, false) })
	return n
}

// stop ends n: kill closes its etcd client first (no revoke: its lease
// expires as a dead process's would), then stops the member and closes
// the replica and the log.
func (c *cluster) stop(n *testNode, kill bool) {
	c.mu.Lock()
	if n.stopped {
		c.mu.Unlock()
		return
	}
	n.stopped = true
	if c.nodes[n.id] == n {
		delete(c.nodes, n.id)
	}
	c.mu.Unlock()
	if kill {
		n.m.Replica().Close() // the process dies: no more puts, no HA
		n.cli.Close()
	}
	n.cancel()
	if err := <-n.done; err != nil {
		c.t.Errorf("node %d Run: %v", n.id, err)
	}
	n.m.Close()
	n.cli.Close()
	if err := n.log.Close(); err != nil {
		c.t.Errorf("node %d log: %v", n.id, err)
	}
}

func (c *cluster) live() []*testNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ns []*testNode
	for _, n := range c.nodes {
		ns = append(ns, n)
	}
	slices.SortFunc(ns, func(a, b *testNode) int { return int(a.id - b.id) })
	return ns
}

// waitFor polls cond (real processes and etcd: bounded) until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// master returns the live node serving as an unfenced master, if one.
func (c *cluster) master() *testNode {
	for _, n := range c.live() {
		if st := n.m.Status(); st.Role == core.RoleMaster && st.Fenced == "" {
			return n
		}
	}
	return nil
}

// waitGroup waits for master at an epoch above minEpoch, every other live
// node its slave, and the controller's in-sync set equal to set.
func (c *cluster) waitGroup(master int64, minEpoch int32, set []int64) *testNode {
	c.t.Helper()
	var m *testNode
	waitFor(c.t, fmt.Sprintf("master %d above epoch %d, in-sync set %v", master, minEpoch, set), func() bool {
		m = c.master()
		if m == nil || m.id != master {
			return false
		}
		st := m.m.Status()
		if st.MasterEpoch <= minEpoch || st.Epoch != st.MasterEpoch || !slices.Equal(st.InSyncSet, set) {
			return false
		}
		ms := m.m.Replica().Status().Master
		if ms == nil || !slices.Equal(ms.SyncStateSet, set) {
			return false
		}
		for _, n := range c.live() {
			if n != m && (n.m.Status().Role != core.RoleSlave || n.m.Status().MasterHA != m.ha) {
				return false
			}
		}
		return true
	})
	return m
}

// acked is a message that a member answered PUT_OK for.
type acked struct {
	off  int64
	body []byte
}

// producer puts to whichever member is master until stopped, keeping the
// PUT_OK answers. Errors are expected during a failover.
type producer struct {
	mu    sync.Mutex
	acks  []acked
	last  time.Time // of the last PUT_OK
	stop  chan struct{}
	done  chan struct{}
	errs  int
	seq   int
	byMem map[int64]int
}

func (c *cluster) produce(only *testNode) *producer {
	p := &producer{stop: make(chan struct{}), done: make(chan struct{}), byMem: map[int64]int{}}
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stop:
				return
			default:
			}
			targets := c.live()
			if only != nil {
				targets = []*testNode{only}
			}
			ok := false
			for _, n := range targets {
				p.seq++
				body := fmt.Appendf(nil, "message %06d", p.seq)
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				res, err := n.m.Put(ctx, &record.Message{Topic: "T", Body: body})
				cancel()
				if err != nil {
					continue
				}
				if res.Status != core.PutOK {
					continue
				}
				ok = true
				p.mu.Lock()
				p.acks = append(p.acks, acked{res.Offset, body})
				p.last = time.Now()
				p.byMem[n.id]++
				p.mu.Unlock()
				break
			}
			if !ok {
				p.mu.Lock()
				p.errs++
				p.mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	return p
}

func (p *producer) count(id int64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byMem[id]
}

func (p *producer) end() []acked {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.acks)
}

// checkAcked checks that every PUT_OK message is in n's log at its offset.
func checkAcked(t *testing.T, n *testNode, acks []acked) {
	t.Helper()
	if len(acks) == 0 {
		t.Fatal("no put was acknowledged")
	}
	for _, a := range acks {
		recs, _, err := n.log.ReadMessages(a.off, 1)
		if err != nil || len(recs) != 1 {
			t.Fatalf("acknowledged message at %d missing on node %d: %v", a.off, n.id, err)
		}
		if recs[0].PhysicalOffset != a.off || !bytes.Equal(recs[0].Body, a.body) {
			t.Fatalf("offset %d on node %d holds %q, acknowledged %q", a.off, n.id, recs[0].Body, a.body)
		}
	}
}

// sameLogs waits until every live node's log ends where master's does and
// checks that they hold the same bytes.
func (c *cluster) sameLogs(master *testNode) {
	t := c.t
	t.Helper()
	want := master.log.Bounds().Max
	for _, n := range c.live() {
		waitFor(t, fmt.Sprintf("node %d at max offset %d", n.id, want), func() bool { return n.log.Bounds().Max == want })
		for off := int64(0); off < want; {
			va, err := master.log.Read(off, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			vb, err := n.log.Read(off, len(va.Data))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(va.Data, vb.Data) {
				t.Fatalf("node %d differs from master %d in [%d, %d)", n.id, master.id, off, off+int64(len(va.Data)))
			}
			off += int64(len(va.Data))
			va.Release()
			vb.Release()
		}
	}
}

func putN(t *testing.T, n *testNode, count int) {
	t.Helper()
	for i := range count {
		res, err := n.m.Put(context.Background(), &record.Message{Topic: "T", Body: fmt.Appendf(nil, "put %d", i)})
		if err != nil || res.Status != core.PutOK {
			t.Fatalf("put %d on node %d: %+v %v", i, n.id, res, err)
		}
	}
}

// TestFailoverAndRejoin: the first member is elected; its slaves join
// the in-sync set through etcd; the master is killed during concurrent
// sync puts; a member of the set is elected at a higher epoch and takes
// puts; every PUT_OK message is there at its offset; the old master,
// restarted on its data directory with an unreplicated tail, rejoins as a
// slave, truncates the tail, and all logs end byte-identical.
func TestFailoverAndRejoin(t *testing.T) {
	c := newCluster(t)
	dirs := map[int64]string{1: t.TempDir(), 2: t.TempDir(), 3: t.TempDir()}
	has := map[int64]string{1: freeAddr(t), 2: freeAddr(t), 3: freeAddr(t)}
	n1 := c.start(1, dirs[1], has[1], etcdURL)
	c.waitGroup(1, 0, []int64{1})
	c.start(2, dirs[2], has[2], etcdURL)
	c.start(3, dirs[3], has[3], etcdURL)
	c.waitGroup(1, 0, []int64{1, 2, 3})
	if st := n1.m.Status(); st.MasterEpoch != 1 || st.MasterAPI != "127.0.0.1:8001" || !st.Registered || !st.LeaseValid {
		t.Fatalf("master status %+v", st)
	}
	putN(t, n1, 20)

	p := c.produce(nil)
	waitFor(t, "puts on the first master", func() bool { return p.count(1) >= 20 })
	c.stop(n1, true)
	// An unreplicated tail: the old master stored these, then died
	// before any slave got them.
	tail := openLog(t, dirs[1])
	for i := range 3 {
		if _, err := tail.Append(context.Background(), &record.Message{Topic: "T", Body: fmt.Appendf(nil, "tail %d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	tailMax := tail.Bounds().Max
	if err := tail.Close(); err != nil {
		t.Fatal(err)
	}

	var m2 *testNode
	waitFor(t, "a new master", func() bool { m2 = c.master(); return m2 != nil })
	waitFor(t, "puts on the new master", func() bool { return p.count(m2.id) >= 20 })
	acks := p.end()
	st := m2.m.Status()
	if st.MasterEpoch != 2 || st.Epoch != 2 {
		t.Fatalf("new master %d at epoch %d (status %+v), want 2", m2.id, st.MasterEpoch, st)
	}
	checkAcked(t, m2, acks)

	// The old master comes back on the same directory and HA address.
	n1 = c.start(1, dirs[1], has[1], etcdURL)
	waitFor(t, "node 1 following the new master", func() bool {
		s := n1.m.Status()
		return s.Role == core.RoleSlave && s.MasterHA == m2.ha
	})
	putN(t, m2, 5)
	c.sameLogs(m2)
	tr := n1.m.Replica().Status().Slave.Truncated
	if tr == nil || tr.From != tailMax || tr.To >= tailMax {
		t.Fatalf("node 1 truncation %+v, want from %d", tr, tailMax)
	}
	checkAcked(t, n1, acks)
	c.waitGroup(m2.id, 1, []int64{1, 2, 3})
	if v := testutil.ToFloat64(m2.m.met.role); v != float64(core.RoleMaster) {
		t.Fatalf("role gauge of the new master: %v", v)
	}
	if v := testutil.ToFloat64(n1.m.met.role); v != float64(core.RoleSlave) {
		t.Fatalf("role gauge of the old master: %v", v)
	}
}

// proxy forwards TCP to etcd until blocked: then it drops every
// connection and refuses new ones (a partition between a node and etcd).
type proxy struct {
	l      net.Listener
	target string

	mu      sync.Mutex
	blocked bool
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) url() string { return "http://" + p.l.Addr().String() }

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.blocked {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		go pipe(up, c)
		go pipe(c, up)
	}
}

func (p *proxy) block(b bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked = b
	if b {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

func (p *proxy) close() {
	p.l.Close()
	p.block(true)
	p.wg.Wait()
}

// TestLeaseLossFencesBeforeElection: the master loses etcd (its
// connections cut) during sync puts: it fences itself before the group
// elects another master, no PUT_OK comes from it after that, every PUT_OK
// message is on the new master, and once etcd is reachable again it
// registers again and rejoins as a slave.
func TestLeaseLossFencesBeforeElection(t *testing.T) {
	c := newCluster(t)
	u := strings.TrimPrefix(etcdURL, "http://")
	px := newProxy(t, u)
	n1 := c.start(1, t.TempDir(), freeAddr(t), px.url())
	c.waitGroup(1, 0, []int64{1})
	c.start(2, t.TempDir(), freeAddr(t), etcdURL)
	c.start(3, t.TempDir(), freeAddr(t), etcdURL)
	c.waitGroup(1, 0, []int64{1, 2, 3})

	// The test watches the group as an observer with its own client.
	cli := c.client(etcdURL)
	defer cli.Close()
	obs := c.store(cli, "observer")
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	updates, err := obs.Watch(wctx, "g")
	if err != nil {
		t.Fatal(err)
	}

	p := c.produce(n1)
	waitFor(t, "puts on the master", func() bool { return p.count(1) >= 20 })
	cut := time.Now()
	px.block(true)

	var fencedAt time.Time
	var elected controller.Group
	var electedAt time.Time
	fenceSeen := make(chan time.Time, 1)
	go func() {
		for {
			if st := n1.m.Replica().Status(); st.Master == nil || st.Master.Fenced != "" {
				fenceSeen <- time.Now()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	deadline := time.After(15 * time.Second)
	for electedAt.IsZero() {
		select {
		case u := <-updates:
			if u.Group.Master != controller.NoMaster && u.Group.Master != 1 {
				elected, electedAt = u.Group, time.Now()
			}
		case <-deadline:
			t.Fatal("no election after the partition")
		}
	}
	select {
	case fencedAt = <-fenceSeen:
	case <-time.After(5 * time.Second):
		t.Fatal("the partitioned master never fenced")
	}
	acks := p.end()
	p.mu.Lock()
	last := p.last
	p.mu.Unlock()
	t.Logf("cut at 0, fenced at %v, last PUT_OK at %v, elected %d at epoch %d at %v",
		fencedAt.Sub(cut), last.Sub(cut), elected.Master, elected.MasterEpoch, electedAt.Sub(cut))
	if !fencedAt.Before(electedAt) {
		t.Fatalf("fenced at %v, after the election at %v", fencedAt.Sub(cut), electedAt.Sub(cut))
	}
	if fencedAt.Sub(cut) > testTTL {
		t.Fatalf("fenced %v after the cut, later than the TTL", fencedAt.Sub(cut))
	}
	if !last.Before(electedAt) {
		t.Fatalf("PUT_OK at %v from the old master after the election at %v", last.Sub(cut), electedAt.Sub(cut))
	}
	if elected.MasterEpoch != 2 {
		t.Fatalf("elected %+v", elected)
	}
	if _, err := n1.m.Put(context.Background(), &record.Message{Topic: "T", Body: []byte("late")}); !errors.Is(err, core.ErrFenced) {
		t.Fatalf("put on the partitioned master: %v", err)
	}
	var m2 *testNode
	waitFor(t, "the new master serving", func() bool { m2 = c.master(); return m2 != nil && m2.id == elected.Master })
	checkAcked(t, m2, acks)
	if v := testutil.ToFloat64(n1.m.met.fenced); v != 1 {
		t.Fatalf("fenced gauge %v", v)
	}

	px.block(false)
	waitFor(t, "node 1 registered again as a slave", func() bool {
		s := n1.m.Status()
		return s.Registered && s.Role == core.RoleSlave && s.MasterHA == m2.ha
	})
	// On a loaded machine a renewal may come late (fence at 500 ms): the
	// master fences, registers again and is elected again; put on the
	// master of then.
	waitFor(t, "a master with a valid lease", func() bool {
		m2 = c.master()
		return m2 != nil && m2.m.Status().LeaseValid
	})
	putN(t, m2, 5)
	c.sameLogs(m2)
	checkAcked(t, n1, acks)
	if v := testutil.ToFloat64(n1.m.met.lost); v < 1 {
		t.Fatalf("lease lost counter %v", v)
	}
}

// TestRestartedSoleMaster: a group's only member dies and comes back on
// its data directory while the group still names it master of its last
// epoch (nobody else supervised the expiry): it cannot serve that epoch
// again, demotes itself, and is elected at the next epoch with its data.
func TestRestartedSoleMaster(t *testing.T) {
	c := newCluster(t)
	dir, ha := t.TempDir(), freeAddr(t)
	n := c.start(1, dir, ha, etcdURL)
	c.waitGroup(1, 0, []int64{1})
	putN(t, n, 5)
	before := n.log.Bounds().Max
	c.stop(n, true)

	n = c.start(1, dir, ha, etcdURL)
	m := c.waitGroup(1, 1, []int64{1})
	if st := m.m.Status(); st.MasterEpoch != 2 || st.Epoch != 2 || st.MaxOffset != before {
		t.Fatalf("after the restart: %+v, want epoch 2 at max offset %d", st, before)
	}
	putN(t, m, 2)
	if n.log.Bounds().Max <= before {
		t.Fatal("no put after the restart")
	}
}

func TestNewValidates(t *testing.T) {
	cli := (&cluster{t: t}).client(etcdURL)
	defer cli.Close()
	s, err := etcdstore.New(etcdstore.Config{Client: cli})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l := openLog(t, dir)
	defer l.Close()
	ep, err := epoch.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	good := Config{Replica: core.ReplicaConfig{Store: l, Transport: tcptransport.New(tcptransport.DefaultOptions()), Epochs: ep,
		Master: core.MasterConfig{ListenAddr: "127.0.0.1:10912"}}, Store: s, Group: "g", BrokerID: 1}
	for name, mut := range map[string]func(*Config){
		"no store":           func(c *Config) { c.Store = nil },
		"bad group":          func(c *Config) { c.Group = "a b" },
		"negative id":        func(c *Config) { c.BrokerID = -1 },
		"port 0":             func(c *Config) { c.Replica.Master.ListenAddr = "127.0.0.1:0" },
		"fence after >= ttl": func(c *Config) { c.LeaseTTL, c.FenceAfter = time.Second, time.Second },
		"renew >= fence":     func(c *Config) { c.FenceAfter, c.RenewInterval = time.Second, time.Second },
	} {
		cfg := good
		mut(&cfg)
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	m, err := New(good)
	if err != nil {
		t.Fatal(err)
	}
	if m.cfg.LeaseTTL != DefaultLeaseTTL || m.cfg.FenceAfter != DefaultLeaseTTL/2 || m.cfg.RenewInterval != DefaultLeaseTTL/6 ||
		m.cfg.HAAddr != "127.0.0.1:10912" {
		t.Fatalf("defaults: %+v", m.cfg)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestMasterListenFailureHandsEpochBack: the member the controller elects
// cannot listen on its HA address (another socket holds it). It hands the
// epoch back instead of leaving the group with a master that serves
// nothing: the controller elects again (here the same member, the only
// one in the in-sync set, at a newer epoch), and once the address is free
// the member serves.
func TestMasterListenFailureHandsEpochBack(t *testing.T) {
	c := newCluster(t)
	n1 := c.start(1, t.TempDir(), freeAddr(t), etcdURL)
	c.waitGroup(1, 0, []int64{1})
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	n2 := c.start(2, t.TempDir(), held.Addr().String(), etcdURL)
	c.waitGroup(1, 0, []int64{1, 2})
	putN(t, n1, 3)
	c.stop(n1, true)

	// Elected at epoch 2, it cannot listen and hands the epoch back: the
	// group's master epoch moves past 2 while the address is held.
	waitFor(t, "the epoch handed back", func() bool {
		st := n2.m.Status()
		return st.MasterEpoch > 2 && st.Role != core.RoleMaster
	})
	held.Close()
	m := c.waitGroup(2, 2, []int64{2})
	putN(t, m, 2)
}
