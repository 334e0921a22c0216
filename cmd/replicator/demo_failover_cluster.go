package main

// The machinery of demo --failover and BenchmarkFailover: a controller
// and three controller-mode nodes as child processes (failoverCluster),
// and producers that follow the master and account each put's outcome
// (failoverProducers, failoverRecorder).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/childproc"
	"github.com/replicatorhq/replicator/internal/config"
)

// failoverConfig configures a failoverCluster.
type failoverConfig struct {
	Exe           string // the replicator binary
	Dir           string // data directories and logs
	LeaseTTL      time.Duration
	ElectionDelay time.Duration
	Replication   string // sync or async
	SegmentSize   int64
	LogLevel      string // of the children; "" is info
}

// failoverNode is one node of the cluster (broker id = index + 1).
type failoverNode struct {
	id   int64
	name string
	args []string
	api  string
	ha   string
	data string
	log  string
	proc *childproc.Proc // nil while killed
	sc   *client
}

// failoverCluster is a controller and failoverNodes nodes, all child
// processes of this one.
type failoverCluster struct {
	cfg     failoverConfig
	ctlURL  string
	ctlArgs []string
	ctl     *childproc.Proc
	nodes   []*failoverNode
}

// nodeStatus is a node's GET /v1/status answer with the controller-mode
// fields.
type nodeStatus struct {
	api.Status
	Group          string `json:"group"`
	MasterBrokerID *int64 `json:"master_broker_id"`
	MasterAPI      string `json:"master_api"`
	Controller     *struct {
		Registered     bool   `json:"registered"`
		LeaseValid     bool   `json:"lease_valid"`
		NoMasterReason string `json:"no_master_reason"`
	} `json:"controller"`
}

// startFailoverCluster starts the controller and the nodes and waits
// until every node answers its status.
func startFailoverCluster(ctx context.Context, cfg failoverConfig) (*failoverCluster, error) {
	if cfg.LogLevel == "" {
		cfg.LogLevel = "info"
	}
	ports, err := freePorts(1 + 2*failoverNodes)
	if err != nil {
		return nil, fmt.Errorf("finding free ports: %w", err)
	}
	c := &failoverCluster{cfg: cfg}
	ctlListen := fmt.Sprintf("127.0.0.1:%d", ports[0])
	c.ctlURL = "http://" + ctlListen
	c.ctlArgs = []string{"controller", "--data", filepath.Join(cfg.Dir, "controller"), "--listen", ctlListen,
		"--election-delay", cfg.ElectionDelay.String()}
	for i := range failoverNodes {
		n := &failoverNode{id: int64(i + 1), name: fmt.Sprintf("node %d", i+1)}
		listen := fmt.Sprintf("127.0.0.1:%d", ports[1+2*i])
		n.ha = fmt.Sprintf("127.0.0.1:%d", ports[2+2*i])
		n.api = "http://" + listen
		n.data = filepath.Join(cfg.Dir, fmt.Sprintf("node%d", i+1))
		n.log = filepath.Join(cfg.Dir, fmt.Sprintf("node%d.log", i+1))
		n.args = []string{"node", "--controller", c.ctlURL, "--group", failoverGroup,
			"--broker-id", strconv.FormatInt(n.id, 10), "--data", n.data, "--listen", listen,
			"--ha-listen", n.ha, "--replication", cfg.Replication, "--lease-ttl", cfg.LeaseTTL.String(),
			"--segment-size", config.FormatSize(cfg.SegmentSize),
			// A slave that finds its new master's HA port not open yet
			// dials again after 1 s instead of 5: the rejoin shows sooner.
			// The failover window does not depend on it (the elected
			// master's in-sync set is itself).
			"--reconnect-delay", "1s"}
		n.sc = newClient(n.api, time.Second)
		c.nodes = append(c.nodes, n)
	}
	if c.ctl, err = startChild(cfg.Exe, "controller", filepath.Join(cfg.Dir, "controller.log"), c.logArgs(c.ctlArgs)...); err != nil {
		return c, err
	}
	if err := c.waitController(ctx); err != nil {
		return c, err
	}
	for _, n := range c.nodes {
		if err := c.startNode(n); err != nil {
			return c, err
		}
	}
	for _, n := range c.nodes {
		if err := c.waitUp(ctx, n); err != nil {
			return c, err
		}
	}
	return c, nil
}

func (c *failoverCluster) logArgs(args []string) []string {
	return append([]string{"--log-level", c.cfg.LogLevel, "--log-format", "text"}, args...)
}

func (c *failoverCluster) startNode(n *failoverNode) error {
	p, err := startChild(c.cfg.Exe, n.name, n.log, c.logArgs(n.args)...)
	if err != nil {
		return err
	}
	n.proc = p
	return nil
}

// waitController waits until the controller's etcd answers /health.
func (c *failoverCluster) waitController(ctx context.Context) error {
	hc := &http.Client{Timeout: time.Second}
	defer hc.CloseIdleConnections()
	return pollChild(ctx, c.ctl, demoStartTimeout, func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.ctlURL+"/health", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/health answers %s", resp.Status)
		}
		return nil
	})
}

// waitUp waits until n answers its status.
func (c *failoverCluster) waitUp(ctx context.Context, n *failoverNode) error {
	return pollChild(ctx, n.proc, demoStartTimeout, func() error {
		_, err := c.status(ctx, n)
		return err
	})
}

// pollChild calls cond every demoPoll until it returns nil, p exits, ctx
// ends or timeout passes (childproc.Poll).
func pollChild(ctx context.Context, p *childproc.Proc, timeout time.Duration, cond func() error) error {
	return childproc.Poll(ctx, p, timeout, demoPoll, cond)
}

func (c *failoverCluster) status(ctx context.Context, n *failoverNode) (nodeStatus, error) {
	var st nodeStatus
	err := n.sc.do(ctx, http.MethodGet, "/v1/status", nil, nil, nil, &st)
	return st, err
}

// statuses reads every running node's status; a killed or silent node
// has ok false.
func (c *failoverCluster) statuses(ctx context.Context) ([]nodeStatus, []bool) {
	sts := make([]nodeStatus, len(c.nodes))
	ok := make([]bool, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		if n.proc == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := c.status(ctx, n)
			sts[i], ok[i] = st, err == nil
		}()
	}
	wg.Wait()
	return sts, ok
}

// isMaster and isSlave read a status's role: RocketMQ's broker role
// names (SYNC_MASTER, ASYNC_MASTER, SLAVE, NONE) or lower-case ones.
func isMaster(role string) bool { return strings.HasSuffix(strings.ToUpper(role), "MASTER") }
func isSlave(role string) bool  { return strings.ToUpper(role) == "SLAVE" }

// shortRole is a role for a progress line.
func shortRole(role string) string {
	switch {
	case isMaster(role):
		return "master"
	case isSlave(role):
		return "slave"
	case role == "":
		return "?"
	}
	return strings.ToLower(role)
}

// stable returns the index of the master when every node is up, one is
// master with every node in its in-sync set, and the others are its
// slaves at its epoch with their HA connection in TRANSFER.
func stable(sts []nodeStatus, ok []bool) (int, error) {
	m := -1
	for i, st := range sts {
		if !ok[i] {
			return -1, fmt.Errorf("node %d is not up", i+1)
		}
		if isMaster(st.Role) {
			if m >= 0 {
				return -1, fmt.Errorf("two masters: nodes %d and %d", m+1, i+1)
			}
			m = i
		}
	}
	if m < 0 {
		return -1, errors.New("no master yet")
	}
	ms := sts[m]
	if ms.Fenced != "" {
		return -1, fmt.Errorf("the master (node %d) is fenced: %s", m+1, ms.Fenced)
	}
	if len(ms.InSync) != len(sts) {
		return -1, fmt.Errorf("in-sync set %v", ms.InSync)
	}
	for i, st := range sts {
		if i == m {
			continue
		}
		if !isSlave(st.Role) || st.Epoch != ms.Epoch || st.Master == nil || st.Master.HandshakeState != "TRANSFER" {
			state := ""
			if st.Master != nil {
				state = st.Master.HandshakeState
			}
			return -1, fmt.Errorf("node %d: %s at epoch %d (%s)", i+1, shortRole(st.Role), st.Epoch, state)
		}
	}
	return m, nil
}

// waitStable waits for stable (see there); each is called with every
// poll's statuses (for a progress display) when not nil.
func (c *failoverCluster) waitStable(ctx context.Context, timeout time.Duration, each func([]nodeStatus, []bool)) (int, nodeStatus, error) {
	var m int
	var sts []nodeStatus
	err := pollChild(ctx, nil, timeout, func() error {
		if err := c.exitedEarly(); err != nil {
			return err
		}
		var ok []bool
		sts, ok = c.statuses(ctx)
		if each != nil {
			each(sts, ok)
		}
		var err error
		m, err = stable(sts, ok)
		return err
	})
	if err != nil {
		if ee := c.exitedEarly(); ee != nil {
			return -1, nodeStatus{}, ee
		}
		return -1, nodeStatus{}, fmt.Errorf("waiting for a master with every node in sync: %w", err)
	}
	return m, sts[m], nil
}

// exitedEarly reports a child that exited by itself.
func (c *failoverCluster) exitedEarly() error {
	procs := []*childproc.Proc{c.ctl}
	for _, n := range c.nodes {
		procs = append(procs, n.proc)
	}
	for _, p := range procs {
		if p == nil {
			continue
		}
		select {
		case <-p.Done():
			return p.Exited()
		default:
		}
	}
	return nil
}

// kill sends SIGKILL to node i and waits for its exit; it returns the
// time right before the signal.
func (c *failoverCluster) kill(i int) (time.Time, int, error) {
	n := c.nodes[i]
	p := n.proc
	if p == nil {
		return time.Time{}, 0, fmt.Errorf("%s is not running", n.name)
	}
	pid := p.Pid()
	at := time.Now()
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return at, pid, fmt.Errorf("kill -9 %s: %w", n.name, err)
	}
	<-p.Done()
	n.proc = nil
	return at, pid, nil
}

// restart starts a killed node again on its data directory.
func (c *failoverCluster) restart(i int) error {
	n := c.nodes[i]
	if n.proc != nil {
		return fmt.Errorf("%s is running", n.name)
	}
	return c.startNode(n)
}

// nodeByAPI returns the index of the node whose API base URL is u, or -1.
func (c *failoverCluster) nodeByAPI(u string) int {
	u = strings.TrimSuffix(u, "/")
	for i, n := range c.nodes {
		if n.api == u {
			return i
		}
	}
	return -1
}

// stop stops the nodes, then the controller (SIGTERM; SIGKILL after
// demoStopTimeout); it returns the errors of those that did not exit
// cleanly.
func (c *failoverCluster) stop() error {
	procs := []*childproc.Proc{}
	for i := len(c.nodes) - 1; i >= 0; i-- {
		procs = append(procs, c.nodes[i].proc)
	}
	errs := stopChildren(append(procs, c.ctl)...)
	for _, n := range c.nodes {
		n.sc.hc.CloseIdleConnections()
	}
	return errors.Join(errs...)
}

// putOutcome classifies one put attempt.
type putOutcome int

const (
	putOK       putOutcome = iota // PUT_OK
	putRedirect                   // 403 from a slave naming its master
	putRefused                    // nothing stored: connection refused, 503 "stored": "no", 403 without a master
	putUnknown                    // may be stored: reset, timeout, 503 "maybe", a status other than PUT_OK
	putFatal                      // a request the node rejects (400, 413): the demo's own error
)

// putAnswer is a put's 200 answer with the controller-mode fields.
type putAnswer struct {
	Status   string `json:"status"`
	Offset   int64  `json:"offset"`
	Epoch    int32  `json:"epoch"`
	BrokerID int64  `json:"broker_id"`
}

// putError is a put's error answer with the controller-mode fields.
type putError struct {
	Error     string `json:"error"`
	MasterAPI string `json:"master_api"`
	Stored    string `json:"stored"`
}

// sendPut sends one message to base and classifies the answer.
func sendPut(ctx context.Context, hc *http.Client, base, key string, body []byte) (putAnswer, putOutcome, string, error) {
	var ans putAnswer
	u := base + "/v1/topics/" + failoverTopic + "/messages?" + url.Values{"keys": {key}, "tags": {"failover"}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return ans, putFatal, "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return ans, putRefused, "", err
		}
		return ans, putUnknown, "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return ans, putUnknown, "", fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(data, &ans); err != nil {
			return ans, putUnknown, "", fmt.Errorf("bad answer: %w", err)
		}
		if ans.Status != "PUT_OK" {
			return ans, putUnknown, "", fmt.Errorf("status %s", ans.Status)
		}
		return ans, putOK, "", nil
	}
	var pe putError
	if json.Unmarshal(data, &pe) != nil || pe.Error == "" {
		pe.Error = strings.TrimSpace(string(data))
	}
	err = &statusError{Code: resp.StatusCode, Msg: pe.Error}
	switch {
	case resp.StatusCode == http.StatusForbidden && pe.MasterAPI != "":
		return ans, putRedirect, pe.MasterAPI, err
	case resp.StatusCode == http.StatusForbidden:
		return ans, putRefused, "", err
	case resp.StatusCode == http.StatusServiceUnavailable && pe.Stored != "maybe":
		return ans, putRefused, "", err
	case resp.StatusCode >= 500:
		return ans, putUnknown, "", err
	}
	return ans, putFatal, "", err
}

// putAck is a PUT_OK: the message's key, where it is, and who took it.
type putAck struct {
	Key    string
	Offset int64
	Epoch  int32 // the answer's epoch (0 if the node does not say)
	Node   int   // the index of the node that answered
	At     time.Time
}

// failoverWindow accounts one failover: from the kill to each producer's
// first PUT_OK on another node.
type failoverWindow struct {
	KillAt    time.Time
	Killed    int   // the index of the killed master
	OldEpoch  int32 // its epoch
	First     putAck
	firstCh   chan struct{}
	recovered map[int]bool
	Unknown   int // puts with an unknown outcome
	Refused   int // attempts refused (nothing stored), retried
	Delayed   int // puts that were refused at least once, then PUT_OK
}

// failoverRecorder collects the producers' outcomes.
type failoverRecorder struct {
	ok, unknown, refused, bytes atomic.Int64

	mu        sync.Mutex
	keepAcks  bool
	acks      []putAck
	producers int
	win       *failoverWindow
	fatal     error
}

func (r *failoverRecorder) recordOK(p int, a putAck, size int, wasRefused bool) {
	r.ok.Add(1)
	r.bytes.Add(int64(size))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keepAcks {
		r.acks = append(r.acks, a)
	}
	w := r.win
	if w == nil || a.At.Before(w.KillAt) || w.recovered[p] || a.Node == w.Killed || (a.Epoch != 0 && a.Epoch <= w.OldEpoch) {
		return
	}
	w.recovered[p] = true
	if wasRefused {
		w.Delayed++
	}
	if w.First.At.IsZero() {
		w.First = a
		close(w.firstCh)
	}
}

func (r *failoverRecorder) recordFailure(p int, o putOutcome, at time.Time) {
	if o == putUnknown {
		r.unknown.Add(1)
	} else {
		r.refused.Add(1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.win
	if w == nil || at.Before(w.KillAt) || w.recovered[p] {
		return
	}
	if o == putUnknown {
		w.Unknown++
	} else {
		w.Refused++
	}
}

func (r *failoverRecorder) setFatal(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fatal == nil {
		r.fatal = err
	}
}

func (r *failoverRecorder) fatalErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fatal
}

// arm starts a window: call it right before the kill, with the time the
// kill is sent.
func (r *failoverRecorder) arm(killed int, oldEpoch int32) *failoverWindow {
	w := &failoverWindow{Killed: killed, OldEpoch: oldEpoch, firstCh: make(chan struct{}), recovered: map[int]bool{}}
	r.mu.Lock()
	r.win = w
	r.mu.Unlock()
	return w
}

// setKillTime records when the kill was sent (arm comes first, so that no
// outcome after the kill is missed).
func (r *failoverRecorder) setKillTime(w *failoverWindow, at time.Time) {
	r.mu.Lock()
	w.KillAt = at
	r.mu.Unlock()
}

// window returns a copy of w's counts and whether every producer
// recovered.
func (r *failoverRecorder) window(w *failoverWindow) (failoverWindow, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cp := *w
	cp.recovered = nil
	return cp, len(w.recovered) >= r.producers
}

// failoverProducers write messages to the cluster's master, following
// 403s, retrying refused puts after failoverBackoff, and moving on after
// a put with an unknown outcome.
type failoverProducers struct {
	c    *failoverCluster
	rec  *failoverRecorder
	stop atomic.Bool
	wg   sync.WaitGroup
}

func startFailoverProducers(ctx context.Context, c *failoverCluster, n, size int, keepAcks bool, master int) *failoverProducers {
	p := &failoverProducers{c: c, rec: &failoverRecorder{keepAcks: keepAcks, producers: n}}
	for id := range n {
		p.wg.Add(1)
		go p.run(ctx, id, size, master)
	}
	return p
}

// halt stops the producers after their current put and waits for them.
func (p *failoverProducers) halt() {
	p.stop.Store(true)
	p.wg.Wait()
}

func (p *failoverProducers) run(ctx context.Context, id, size, cur int) {
	defer p.wg.Done()
	hc := newClient("", failoverPutLimit).hc
	defer hc.CloseIdleConnections()
	body := make([]byte, size)
	nodes := p.c.nodes
	pause := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(failoverBackoff):
			return true
		}
	}
	for seq := int64(0); !p.stop.Load() && ctx.Err() == nil; seq++ {
		key := fmt.Sprintf("p%d-%d", id, seq)
		fillBody(body, seq)
		refused, hops := false, 0
		for !p.stop.Load() && ctx.Err() == nil {
			ans, o, to, err := sendPut(ctx, hc, nodes[cur].api, key, body)
			at := time.Now()
			if ctx.Err() != nil {
				return
			}
			switch o {
			case putOK:
				p.rec.recordOK(id, putAck{Key: key, Offset: ans.Offset, Epoch: ans.Epoch, Node: cur, At: at}, size, refused)
			case putFatal:
				p.rec.setFatal(fmt.Errorf("put to %s: %w", nodes[cur].name, err))
				return
			case putRedirect:
				if j := p.c.nodeByAPI(to); j >= 0 && j != cur && hops < len(nodes) {
					cur, hops = j, hops+1
					continue
				}
				o = putRefused
			}
			if o == putOK {
				break
			}
			p.rec.recordFailure(id, o, at)
			cur, hops = (cur+1)%len(nodes), 0
			if !pause() {
				return
			}
			if o == putUnknown {
				break // a new message: this one may be stored
			}
			refused = true
		}
	}
}
