package faults

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/replicatorhq/replicator/faults/history"
	"github.com/replicatorhq/replicator/internal/proctest"
)

// The controller-mode suite (issue 15): three `replicator node` processes
// of one group with sync replication, `replicator controller` (embedded
// etcd, one member or three), concurrent producers over the HTTP API
// recording a history, faults injected in cycles, and the checks of
// package faults/history on the history and the nodes' final logs.

var flagCtlCycles = flag.Int("faults.controller-cycles", 0, "fault cycles per controller-mode scenario and seed (default 1, long 17: 51 per scenario over the 3 seeds)")

// ctlCycles is the number of fault cycles per scenario and seed.
func ctlCycles() int {
	switch {
	case *flagCtlCycles > 0:
		return *flagCtlCycles
	case long():
		return 17
	}
	return 1
}

// Settings of the controller-mode group.
const (
	ctlGroup      = "jepsen"
	leaseTTL      = 2 * time.Second
	electionDelay = "1s"
	// slaveTimeout bounds a sync put's wait for its in-sync set;
	// putTimeout is the producer's per-request timeout (beyond it the
	// outcome is unknown).
	slaveTimeout = "1500ms"
	putTimeout   = 4 * time.Second
	// notCatchup: a slave that lags this long leaves the in-sync set.
	notCatchup = "3s"
	ctlWorkers = 4
	// putEvery paces each worker (at most 100 puts/s each): the history
	// stays a few thousand operations per cycle whatever the speed of
	// the group (a master alone in its in-sync set acknowledges fast).
	putEvery = 10 * time.Millisecond
)

// cmessage is message i of worker w under seed: a pure function of them,
// its body starting with its key.
func cmessage(seed uint64, w, i int) (key, topic string, body []byte) {
	r := rand.New(rand.NewPCG(seed^0x636f6e74, uint64(w)<<32|uint64(i)))
	key = fmt.Sprintf("w%d-i%d", w, i)
	head := fmt.Appendf(nil, "c%d-%s|", seed, key)
	n := len(head) + 32 + r.IntN(1024)
	body = make([]byte, n)
	copy(body, head)
	for j := len(head); j < n; j += 8 {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], r.Uint64())
		copy(body[j:], b[:])
	}
	return key, fmt.Sprintf("Jepsen%d", w%3), body
}

var keyRE = regexp.MustCompile(`^c(\d+)-w(\d+)-i(\d+)\|`)

// messageKey returns the key of a stored message of this suite, checking
// its topic and whole body; a record that is not one gets a key saying
// so (the checker then reports it as foreign).
func messageKey(seed uint64, offset int64, topic string, body []byte) string {
	m := keyRE.FindSubmatch(body)
	if m == nil {
		return fmt.Sprintf("foreign@%d", offset)
	}
	s, _ := strconv.ParseUint(string(m[1]), 10, 64)
	w, _ := strconv.Atoi(string(m[2]))
	i, _ := strconv.Atoi(string(m[3]))
	key, wantTopic, want := cmessage(seed, w, i)
	if s != seed || topic != wantTopic || !bytes.Equal(body, want) {
		return fmt.Sprintf("corrupt@%d(%s)", offset, key)
	}
	return key
}

// ---- controller (etcd) processes ----

// etcdMember is one `replicator controller` process.
type etcdMember struct {
	name string
	p    *proctest.Proc
	// client is its client address (host:port).
	client string
}

// startEtcd starts a controller of n members (1 or 3), each supervising
// the groups with a short election delay, and waits until every member
// is ready.
func startEtcd(t *testing.T, n int) []*etcdMember {
	t.Helper()
	for attempt := 1; ; attempt++ {
		ms, err := tryStartEtcd(t, n)
		if err == nil {
			return ms
		}
		if attempt < 3 && errors.Is(err, errPortTaken) {
			t.Logf("controller lost a port to another test, starting it again: %v", err)
			continue
		}
		t.Fatal(err)
	}
}

var errPortTaken = errors.New("address already in use")

func tryStartEtcd(t *testing.T, n int) ([]*etcdMember, error) {
	addrs, err := proctest.FreeAddrs(2 * n)
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	var peers []string
	for i := range n {
		peers = append(peers, fmt.Sprintf("e%d=http://%s", i+1, addrs[n+i]))
	}
	var ms []*etcdMember
	for i := range n {
		name := fmt.Sprintf("e%d", i+1)
		args := []string{"--log-level", "info", "controller", "--data", filepath.Join(dir, name), "--listen", addrs[i],
			"--election-delay", electionDelay, "--name", name, "--peer-listen", addrs[n+i]}
		if n > 1 {
			args = append(args, "--peers", strings.Join(peers, ","))
		}
		p := proctest.Start(t, bin, "etcd-"+name, args...)
		p.API = "http://" + addrs[i]
		ms = append(ms, &etcdMember{name: name, p: p, client: addrs[i]})
	}
	for _, m := range ms {
		err := proctest.Poll(proctest.WaitTimeout, func() error {
			if ok, err := m.p.Exited(); ok {
				return fmt.Errorf("exited: %v", err)
			}
			return httpOK(m.p.API + "/readyz")
		})
		if err != nil {
			for _, m := range ms {
				m.p.Kill()
			}
			if strings.Contains(m.p.ReadLog(), "address already in use") {
				return nil, fmt.Errorf("%s: %w", m.name, errPortTaken)
			}
			return nil, fmt.Errorf("controller member %s not ready: %w", m.name, err)
		}
	}
	return ms, nil
}

// httpOK GETs url and wants 200.
func httpOK(u string) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d", u, resp.StatusCode)
	}
	return nil
}

// etcdLeader returns the index of the member that says it leads (from
// etcd's etcd_server_is_leader gauge), or an error.
func etcdLeader(ms []*etcdMember) (int, error) {
	var errs []error
	for i, m := range ms {
		if ok, _ := m.p.Exited(); ok {
			continue
		}
		c := proctest.NewClient(m.p.API, 2*time.Second)
		v, found, err := c.Metric(context.Background(), "etcd_server_is_leader")
		c.Close()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", m.name, err))
		case !found:
			errs = append(errs, fmt.Errorf("%s: no etcd_server_is_leader metric", m.name))
		case v == 1:
			return i, nil
		}
	}
	return -1, fmt.Errorf("no member leads: %w", errors.Join(errs...))
}

// ---- proxies ----

// linkProxy is a toxiproxy TCP proxy on a fixed loopback address in front
// of one upstream, that partitions either hard (connections reset, new
// ones refused) or silently (every byte held, as a partition does to
// TCP). toxiproxy v2.5.0's RemoveToxic can wait forever for a link
// whose writer has gone while a latency toxic held its data, so a
// silent partition heals by closing the proxy and opening a new one on
// the same address (the old one's goroutines are toxiproxy's, and
// ignored by goleak in TestMain).
type linkProxy struct {
	t        *testing.T
	name     string
	upstream string
	// Addr is where clients connect instead of the upstream.
	Addr string
	mu   sync.Mutex
	p    *toxiproxy.Proxy
}

func newLinkProxy(t *testing.T, name, upstream string) *linkProxy {
	t.Helper()
	lp := &linkProxy{t: t, name: name, upstream: upstream}
	lp.p = lp.start("127.0.0.1:0")
	lp.Addr = lp.p.Listen
	t.Cleanup(func() {
		lp.mu.Lock()
		defer lp.mu.Unlock()
		lp.p.Stop()
	})
	return lp
}

func (lp *linkProxy) start(listen string) *toxiproxy.Proxy {
	lp.t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, lp.name, listen, lp.upstream)
	var err error
	for range 50 {
		// The old proxy's listener was closed a moment ago: the address
		// is free for us (SO_REUSEADDR), unless another test took it.
		if err = p.Start(); err == nil {
			return p
		}
		time.Sleep(20 * time.Millisecond)
	}
	lp.t.Fatalf("toxiproxy %s on %s: %v", lp.name, listen, err)
	return nil
}

// cut partitions the link, hard or silent.
func (lp *linkProxy) cut(hard bool) {
	lp.t.Helper()
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if hard {
		lp.p.Stop()
		return
	}
	for _, stream := range []string{"upstream", "downstream"} {
		js := fmt.Sprintf(`{"name":"part-%s","type":"latency","stream":%q,"toxicity":1,"attributes":{"latency":3600000}}`, stream, stream)
		if _, err := lp.p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
			lp.t.Fatalf("toxiproxy %s: %v", lp.name, err)
		}
	}
}

// heal ends the partition: a new proxy on the same address.
func (lp *linkProxy) heal() {
	lp.t.Helper()
	lp.mu.Lock()
	defer lp.mu.Unlock()
	lp.p.Stop()
	lp.p = lp.start(lp.Addr)
}

// ---- nodes ----

// cnode is one `replicator node` process of the group.
type cnode struct {
	id  int64
	dir string
	p   *proctest.Proc
	// haProxy fronts the node's HA listener: the node registers its
	// address (--ha-advertise), so the slaves of this node as a master
	// connect through it.
	haProxy *linkProxy
	// etcdProxy is the node's way to the controller (--controller), nil
	// when the node dials the controller's members directly.
	etcdProxy *linkProxy
}

// startNode starts node id of the group on free ports. etcdURLs are the
// controller's endpoints as the node dials them.
func startNode(t *testing.T, dir string, id int64, etcdURLs string, etcdProxy *linkProxy) *cnode {
	t.Helper()
	for attempt := 1; ; attempt++ {
		pp, err := proctest.FreeAddrs(2)
		if err != nil {
			t.Fatal(err)
		}
		n := &cnode{id: id, dir: dir, etcdProxy: etcdProxy}
		n.haProxy = newLinkProxy(t, fmt.Sprintf("ha%d", id), pp[1])
		args := []string{"--log-level", "info", "node", "--controller", etcdURLs, "--group", ctlGroup,
			"--broker-id", strconv.FormatInt(id, 10), "--data", dir, "--listen", pp[0], "--ha-listen", pp[1],
			"--ha-advertise", n.haProxy.Addr, "--replication", "sync", "--lease-ttl", leaseTTL.String(),
			"--slave-timeout", slaveTimeout, "--ha-max-time-slave-not-catchup", notCatchup,
			"--segment-size", segSizeArg, "--max-message-size", maxMsgArg,
			"--reconnect-delay", "100ms", "--metadata-interval", "1s"}
		n.p = proctest.Start(t, bin, fmt.Sprintf("node%d", id), args...)
		n.p.API = "http://" + pp[0]
		err = proctest.Poll(proctest.WaitTimeout, func() error {
			if ok, err := n.p.Exited(); ok {
				return fmt.Errorf("node %d exited: %v", id, err)
			}
			return httpOK(n.p.API + "/readyz")
		})
		if err == nil {
			return n
		}
		n.p.Kill()
		n.haProxy.cut(true)
		if attempt < 3 && strings.Contains(n.p.ReadLog(), "address already in use") {
			t.Logf("node %d lost a port to another test, starting it again", id)
			continue
		}
		t.Fatalf("node %d: %v", id, err)
	}
}

// nodeStatus is the part of GET /v1/status the suite reads (controller
// mode's fields, decoded here so the suite states what it relies on).
type nodeStatus struct {
	Role           string  `json:"role"`
	MaxOffset      int64   `json:"max_offset"`
	MinOffset      int64   `json:"min_offset"`
	BrokerID       int64   `json:"broker_id"`
	Epoch          int32   `json:"epoch"`
	InSync         []int64 `json:"in_sync"`
	Fenced         string  `json:"fenced"`
	Group          string  `json:"group"`
	MasterBrokerID *int64  `json:"master_broker_id"`
	MasterAPI      string  `json:"master_api"`
	ConfirmOffset  int64   `json:"confirm_offset"`
	Controller     *struct {
		Registered     bool   `json:"registered"`
		LeaseValid     bool   `json:"lease_valid"`
		NoMasterReason string `json:"no_master_reason"`
	} `json:"controller"`
}

// isMaster: the node's role is SYNC_MASTER or ASYNC_MASTER.
func isMaster(st nodeStatus) bool { return strings.HasSuffix(st.Role, "_MASTER") }

func getStatus(api string) (nodeStatus, error) {
	var st nodeStatus
	hc := &http.Client{Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(api + "/v1/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return st, err
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status %s: %d %s", api, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("status %s: %w", api, err)
	}
	return st, nil
}

// ---- the group ----

// group is a controller-mode group under test.
type group struct {
	t     *testing.T
	seed  uint64
	rng   *rand.Rand
	etcd  []*etcdMember
	nodes []*cnode
	// firstEpoch is the epoch of the first master.
	firstEpoch int32
	// pauses are the SIGSTOP cycles, checked at the end.
	pauses []pause
}

// pause is a master stopped (SIGSTOP) in epoch until cont (recorder
// clock): it must not acknowledge any put in that epoch after cont.
type pause struct {
	broker int64
	epoch  int32
	cont   int64
}

// checkPauses: no put acknowledged by a paused master in its epoch after
// it resumed.
func (g *group) checkPauses(ops []history.Op) {
	g.t.Helper()
	for _, ps := range g.pauses {
		for _, o := range ops {
			if o.Outcome == history.OK && o.BrokerID == ps.broker && o.Epoch == ps.epoch && o.Return > ps.cont {
				g.t.Errorf("VIOLATION the paused master %d acknowledged a put of epoch %d after SIGCONT: %v", ps.broker, ps.epoch, o)
			}
		}
	}
}

// newGroup starts the controller (etcdMembers members; with one, each
// node reaches it through a proxy of its own) and three nodes, and waits
// for a healthy group.
func newGroup(t *testing.T, seed uint64, etcdMembers int) *group {
	t.Helper()
	g := &group{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x6a657073))}
	g.etcd = startEtcd(t, etcdMembers)
	dir := t.TempDir()
	for id := int64(1); id <= 3; id++ {
		var ep *linkProxy
		urls := ""
		if etcdMembers == 1 {
			ep = newLinkProxy(t, fmt.Sprintf("etcd%d", id), g.etcd[0].client)
			urls = "http://" + ep.Addr
		} else {
			var us []string
			for _, m := range g.etcd {
				us = append(us, "http://"+m.client)
			}
			urls = strings.Join(us, ",")
		}
		g.nodes = append(g.nodes, startNode(t, filepath.Join(dir, fmt.Sprintf("n%d", id)), id, urls, ep))
	}
	m := g.waitHealthy("the first master")
	g.firstEpoch = m.st.Epoch
	return g
}

// apis returns the nodes' API URLs.
func (g *group) apis() []string {
	var out []string
	for _, n := range g.nodes {
		out = append(out, n.p.API)
	}
	return out
}

// node returns the node of broker id.
func (g *group) node(id int64) *cnode { return g.nodes[id-1] }

// master is a node that is the group's master, with its status.
type master struct {
	n  *cnode
	st nodeStatus
}

// findMaster returns the node that acts as master (role master, not
// fenced, lease valid, and the group's master by its own status) with an
// epoch above minEpoch, or an error.
func (g *group) findMaster(minEpoch int32) (master, error) {
	var errs []string
	for _, n := range g.nodes {
		if ok, _ := n.p.Exited(); ok {
			continue
		}
		st, err := getStatus(n.p.API)
		if err != nil {
			errs = append(errs, fmt.Sprintf("node %d: %v", n.id, err))
			continue
		}
		if isMaster(st) && st.Fenced == "" && st.Controller != nil && st.Controller.LeaseValid &&
			st.MasterBrokerID != nil && *st.MasterBrokerID == n.id && st.Epoch > minEpoch {
			return master{n, st}, nil
		}
		errs = append(errs, fmt.Sprintf("node %d: role %s epoch %d fenced %q master %v controller %+v",
			n.id, st.Role, st.Epoch, st.Fenced, ptrVal(st.MasterBrokerID), st.Controller))
	}
	return master{}, errors.New(strings.Join(errs, "; "))
}

func ptrVal(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// waitMaster waits for a master of an epoch above minEpoch.
func (g *group) waitMaster(what string, minEpoch int32) master {
	g.t.Helper()
	var m master
	proctest.Eventually(g.t, what, proctest.WaitTimeout, func() error {
		var err error
		m, err = g.findMaster(minEpoch)
		return err
	})
	return m
}

// waitHealthy waits until the group has a master, every node follows it
// and has caught up, and the in-sync set holds all three nodes.
func (g *group) waitHealthy(what string) master {
	g.t.Helper()
	var m master
	proctest.Eventually(g.t, what+": a healthy group", proctest.WaitTimeout, func() error {
		var err error
		if m, err = g.findMaster(0); err != nil {
			return err
		}
		if len(m.st.InSync) != 3 {
			return fmt.Errorf("master %d: in-sync set %v", m.n.id, m.st.InSync)
		}
		for _, n := range g.nodes {
			if n == m.n {
				continue
			}
			st, err := getStatus(n.p.API)
			if err != nil {
				return err
			}
			if st.MasterBrokerID == nil || *st.MasterBrokerID != m.n.id || st.Role != "SLAVE" {
				return fmt.Errorf("node %d: role %s master %v", n.id, st.Role, ptrVal(st.MasterBrokerID))
			}
		}
		return nil
	})
	return m
}

// waitConverged waits until every node holds the master's log (same max
// offset), with no producer running.
func (g *group) waitConverged() master {
	g.t.Helper()
	m := g.waitHealthy("convergence")
	proctest.Eventually(g.t, "every node at the master's max offset", proctest.WaitTimeout, func() error {
		ms, err := getStatus(m.n.p.API)
		if err != nil {
			return err
		}
		for _, n := range g.nodes {
			st, err := getStatus(n.p.API)
			if err != nil {
				return err
			}
			if st.MaxOffset != ms.MaxOffset {
				return fmt.Errorf("node %d at %d, master %d at %d", n.id, st.MaxOffset, m.n.id, ms.MaxOffset)
			}
		}
		return nil
	})
	return m
}

// readLog reads a node's whole log over the API.
func (g *group) readLog(api string) (history.Log, error) {
	c := proctest.NewClient(api, 30*time.Second)
	defer c.Close()
	ctx := context.Background()
	st, err := c.Status(ctx)
	if err != nil {
		return history.Log{}, err
	}
	l := history.Log{Start: st.MinOffset, End: st.MinOffset, SegmentSize: segSize}
	if st.MaxOffset == st.MinOffset {
		return l, nil
	}
	msgs, err := c.ReadFrom(ctx, st.MinOffset)
	if err != nil {
		return l, err
	}
	for _, m := range msgs {
		next := m.Offset + int64(m.Size)
		if next > st.MaxOffset {
			break // appended after the status (producers run during a cycle's check)
		}
		l.Records = append(l.Records, history.Record{Offset: m.Offset, Next: next, Key: messageKey(g.seed, m.Offset, m.Topic, m.Body)})
		l.End = next
	}
	// The max offset may be past an end-of-segment filler.
	if st.MaxOffset < l.End || st.MaxOffset-l.End >= segSize {
		return l, fmt.Errorf("read %s up to %d, its max offset is %d", api, l.End, st.MaxOffset)
	}
	l.End = st.MaxOffset
	return l, l.Validate()
}

// truncations counts the slaves' truncations of an unconfirmed tail in
// the nodes' logs.
func (g *group) truncations() int {
	n := 0
	for _, nd := range g.nodes {
		n += strings.Count(nd.p.ReadLog(), "truncated the commit log to the consistent point")
	}
	return n
}

// ---- producers ----

// putAnswer is a put's JSON answer: 200 PUT_OK & co., or an error
// answer (403 a slave's, 503 a fenced or masterless node's).
type putAnswer struct {
	Status     string `json:"status"`
	Offset     int64  `json:"offset"`
	NextOffset int64  `json:"next_offset"`
	Epoch      int32  `json:"epoch"`
	BrokerID   int64  `json:"broker_id"`
	Error      string `json:"error"`
	MasterAPI  string `json:"master_api"`
	Stored     string `json:"stored"`
}

// cproducer runs workers that put messages on the group, following 403
// answers to the master, and records the history.
type cproducer struct {
	t      *testing.T
	seed   uint64
	rec    *history.Recorder
	apis   []string
	target atomic.Pointer[string]
	hc     *http.Client
	stop   chan struct{}
	wg     sync.WaitGroup
	oks    atomic.Int64
	// redirects counts followed 403 answers.
	redirects atomic.Int64
	mu        sync.Mutex
	// details counts outcomes by cause, for the report.
	details map[string]int
	bad     []string // answers the suite does not expect at all
}

func startCProducer(t *testing.T, seed uint64, apis []string, workers int) *cproducer {
	t.Helper()
	p := &cproducer{t: t, seed: seed, rec: history.NewRecorder(), apis: apis, stop: make(chan struct{}), details: map[string]int{},
		hc: &http.Client{Timeout: putTimeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	first := apis[0]
	p.target.Store(&first)
	for w := range workers {
		p.wg.Add(1)
		go p.worker(w)
	}
	t.Cleanup(p.halt)
	return p
}

func (p *cproducer) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.wg.Wait()
	p.hc.CloseIdleConnections()
}

// stopped reports whether halt was called.
func (p *cproducer) stopped() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}

func (p *cproducer) count(detail string) {
	p.mu.Lock()
	p.details[detail]++
	p.mu.Unlock()
}

func (p *cproducer) worker(w int) {
	defer p.wg.Done()
	rng := rand.New(rand.NewPCG(p.seed, uint64(w)+100))
	slot := time.Now()
	for i := 0; !p.stopped(); i++ {
		// Pace: the rate of puts, not a synchronisation.
		slot = slot.Add(putEvery)
		if d := time.Until(slot); d > 0 {
			select {
			case <-p.stop:
				return
			case <-time.After(d):
			}
		} else {
			slot = time.Now()
		}
		key, topic, body := cmessage(p.seed, w, i)
		op := history.Op{Client: w, Key: key, Call: p.rec.Now()}
		p.put(&op, topic, body)
		op.Return = p.rec.Now()
		p.rec.Add(op)
		p.count(op.Outcome.String() + ": " + op.Detail)
		if op.Outcome == history.OK {
			p.oks.Add(1)
			continue
		}
		// Back off a little before the next put, and try another node
		// unless a 403 named the master: the fault's timing, not a
		// synchronisation.
		select {
		case <-p.stop:
			return
		case <-time.After(time.Duration(10+rng.IntN(40)) * time.Millisecond):
		}
	}
}

// rotate moves the target to the node after api.
func (p *cproducer) rotate(api string) {
	cur := p.target.Load()
	if *cur != api {
		return // another worker moved it already
	}
	for i, a := range p.apis {
		if a == api {
			next := p.apis[(i+1)%len(p.apis)]
			p.target.CompareAndSwap(cur, &next)
			return
		}
	}
}

// put sends one message, following up to three 403 answers, and fills
// op's outcome.
func (p *cproducer) put(op *history.Op, topic string, body []byte) {
	api := *p.target.Load()
	for hop := 0; ; hop++ {
		a, code, err := p.post(api, topic, body)
		switch {
		case err != nil && errors.Is(err, syscall.ECONNREFUSED):
			// Nothing was sent: the node is down.
			op.Outcome, op.Detail = history.Failed, "connection refused"
			p.rotate(api)
			return
		case err != nil:
			// Sent, no answer: it may be stored, even later.
			op.Outcome, op.Open, op.Detail = history.Unknown, true, "no answer ("+errClass(err)+")"
			p.rotate(api)
			return
		case code == http.StatusOK && a.Status == "PUT_OK":
			op.Outcome, op.Offset, op.Next, op.Epoch, op.BrokerID = history.OK, a.Offset, a.NextOffset, a.Epoch, a.BrokerID
			op.Detail = "PUT_OK"
			return
		case code == http.StatusOK:
			// Stored on the master, not (yet) on its whole in-sync set.
			op.Outcome, op.Detail = history.Unknown, a.Status
			return
		case code == http.StatusForbidden && a.MasterAPI != "" && hop < 3:
			p.redirects.Add(1)
			api = a.MasterAPI
			master := api // a variable of its own: other workers read it
			p.target.Store(&master)
			continue
		case code == http.StatusForbidden:
			op.Outcome, op.Detail = history.Failed, "403 without a master to follow"
			p.rotate(api)
			return
		case code == http.StatusServiceUnavailable && a.Stored == "no":
			op.Outcome, op.Detail = history.Failed, "503 not stored"
			p.rotate(api)
			return
		case code == http.StatusServiceUnavailable && a.Stored == "maybe":
			op.Outcome, op.Detail = history.Unknown, "503 maybe stored"
			p.rotate(api)
			return
		case code == http.StatusServiceUnavailable || code == http.StatusInternalServerError:
			op.Outcome, op.Detail = history.Unknown, fmt.Sprintf("%d %s", code, a.Error)
			p.rotate(api)
			return
		default:
			op.Outcome, op.Detail = history.Unknown, fmt.Sprintf("unexpected %d %s", code, a.Error)
			p.mu.Lock()
			p.bad = append(p.bad, fmt.Sprintf("%s: %d %+v", api, code, a))
			p.mu.Unlock()
			return
		}
	}
}

// errClass names a transport error briefly.
func errClass(err error) string {
	var ne interface{ Timeout() bool }
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "closed"
	}
	return "error"
}

func (p *cproducer) post(api, topic string, body []byte) (putAnswer, int, error) {
	var a putAnswer
	req, err := http.NewRequest(http.MethodPost, api+"/v1/topics/"+url.PathEscape(topic)+"/messages", bytes.NewReader(body))
	if err != nil {
		return a, 0, err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return a, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return a, 0, err
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return a, resp.StatusCode, fmt.Errorf("answer %d %q: %w", resp.StatusCode, b, err)
	}
	return a, resp.StatusCode, nil
}

// waitOKs waits until n more puts were PUT_OK.
func (p *cproducer) waitOKs(t *testing.T, n int) {
	t.Helper()
	target := p.oks.Load() + int64(n)
	proctest.Eventually(t, fmt.Sprintf("%d more PUT_OK", n), proctest.WaitTimeout, func() error {
		if got := p.oks.Load(); got < target {
			p.mu.Lock()
			defer p.mu.Unlock()
			return fmt.Errorf("%d PUT_OK of %d; answers %v", got, target, p.details)
		}
		return nil
	})
}

// ---- checks ----

// checkCycle checks, after a fault cycle, that every put acknowledged
// before now lies on the current master at its offset (a loss shows at
// the cycle that caused it).
func (g *group) checkCycle(p *cproducer, cycle int, m master) int {
	g.t.Helper()
	readAt := p.rec.Now()
	var acked []history.Op
	for _, o := range p.rec.Ops() {
		if o.Outcome == history.OK && o.Return < readAt {
			acked = append(acked, o)
		}
	}
	l, err := g.readLog(m.n.p.API)
	if err != nil {
		g.t.Fatalf("cycle %d: reading the master's log: %v", cycle, err)
	}
	if vs := history.CheckAcked(acked, l); len(vs) > 0 {
		g.t.Fatalf("cycle %d: on the new master %d (epoch %d): %d violations, first %v", cycle, m.n.id, m.st.Epoch, len(vs), vs[0])
	}
	return len(acked)
}

// finish stops the producers, heals and waits for the group to converge,
// reads every node's log, checks the history, stops the nodes and
// compares their commit logs byte for byte. It logs the RESULT line.
func (g *group) finish(p *cproducer, cycles int, start time.Time, extra string) {
	t := g.t
	t.Helper()
	p.halt()
	m := g.waitConverged()
	readCall := p.rec.Now()
	var logs []history.Log
	for _, n := range g.nodes {
		l, err := g.readLog(n.p.API)
		if err != nil {
			t.Fatalf("final read of node %d: %v", n.id, err)
		}
		logs = append(logs, l)
	}
	final := history.Read{Call: readCall, Return: p.rec.Now(), Log: logs[m.n.id-1]}
	for i, l := range logs {
		if l.Start != final.Log.Start || l.End != final.Log.End || len(l.Records) != len(final.Log.Records) {
			t.Fatalf("node %d's log [%d, %d) %d records, the master's [%d, %d) %d", i+1, l.Start, l.End, len(l.Records), final.Log.Start, final.Log.End, len(final.Log.Records))
		}
		for j := range l.Records {
			if l.Records[j] != final.Log.Records[j] {
				t.Fatalf("node %d's record %d is %+v, the master's %+v", i+1, j, l.Records[j], final.Log.Records[j])
			}
		}
	}
	ops := p.rec.Ops()
	g.checkPauses(ops)
	rep := history.Check(ops, final, 2*time.Minute)
	if len(p.bad) > 0 {
		t.Errorf("unexpected answers: %d, first %s", len(p.bad), p.bad[0])
	}
	if !rep.OK() {
		if rep.Lin.Result != "" {
			if f, err := os.CreateTemp("", "replicator-porcupine-*.html"); err == nil {
				if rep.Lin.Visualize(f) == nil {
					t.Logf("porcupine's view of the history: %s", f.Name())
				}
				f.Close()
			}
		}
		for i, v := range rep.Violations {
			if i == 20 {
				t.Errorf("... %d more", len(rep.Violations)-i)
				break
			}
			t.Errorf("VIOLATION %v", v)
		}
		t.FailNow()
	}
	if rep.Counts.OK == 0 {
		t.Fatal("no put was acknowledged: the run proves nothing")
	}
	canary(t, ops, final)
	truncs := g.truncations()
	for _, n := range g.nodes {
		n.p.Stop()
	}
	files := 0
	for _, n := range g.nodes[1:] {
		files = compareDirs(t, g.nodes[0].dir, n.dir, final.Log.Start, final.Log.End)
	}
	for _, e := range g.etcd {
		e.p.Stop()
	}
	p.mu.Lock()
	details := fmt.Sprint(p.details)
	p.mu.Unlock()
	t.Logf("answers by cause: %s", details)
	result(t, "cycles=%d put_ok=%d unknown=%d failed=%d redirects=%d elections=%d epochs_with_acks=%d truncations=%d%s records=%d bytes=%d segment_files=%d linearizable=%s (%d ops in %s) violations=0 elapsed=%s",
		cycles, rep.Counts.OK, rep.Counts.Unknown, rep.Counts.Failed, p.redirects.Load(), m.st.Epoch-g.firstEpoch, rep.Epochs, truncs, extra,
		len(final.Log.Records), final.Log.End-final.Log.Start, files, rep.Lin.Result, rep.Lin.Ops, rep.Lin.Took.Round(time.Millisecond),
		time.Since(start).Round(time.Millisecond))
}

// canary checks that the checks see this run's data: the same history
// against the final log with two acknowledged messages swapped must be
// rejected (lost, and not linearizable).
func canary(t *testing.T, ops []history.Op, final history.Read) {
	t.Helper()
	acked := map[string]bool{}
	for _, o := range ops {
		if o.Outcome == history.OK {
			acked[o.Key] = true
		}
	}
	rs := append([]history.Record(nil), final.Log.Records...)
	for i := len(rs) / 2; i+1 < len(rs); i++ {
		if acked[rs[i].Key] && acked[rs[i+1].Key] {
			rs[i].Key, rs[i+1].Key = rs[i+1].Key, rs[i].Key
			bad := final
			bad.Log.Records = rs
			rep := history.Check(ops, bad, time.Minute)
			kinds := map[history.Kind]bool{}
			for _, v := range rep.Violations {
				kinds[v.Kind] = true
			}
			if !kinds[history.Lost] || !kinds[history.NotLinearizable] {
				t.Fatalf("the checks accept this run's history against a final log with records %d and %d swapped: %v", i, i+1, rep.Violations)
			}
			return
		}
	}
	t.Fatal("no two adjacent acknowledged records for the canary")
}
