package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/core/epoch"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/proctest"
)

// ctlGroup is the group of the controller-mode end-to-end tests.
const ctlGroup = "orders"

// ctlNode is one `replicator node` of a test group.
type ctlNode struct {
	id  int64
	dir string
	p   *proctest.Proc
	c   *proctest.Client
}

// ack is a put answered PUT_OK.
type ack struct {
	body string
	ans  api.PutAnswer
}

// startGroup starts a controller and n nodes of ctlGroup (sync
// replication, a 2 s lease) and waits until one of them is the master
// with every node in its in-sync set.
func startGroup(t *testing.T, n int, extra ...string) (*proctest.Proc, []*ctlNode) {
	t.Helper()
	dir := t.TempDir()
	ctl := proctest.StartController(t, binPath, filepath.Join(dir, "ctl"))
	var nodes []*ctlNode
	for i := 1; i <= n; i++ {
		d := filepath.Join(dir, fmt.Sprintf("n%d", i))
		p := proctest.StartNode(t, binPath, d, ctl.API, ctlGroup, int64(i),
			append([]string{"--replication", "sync", "--slave-timeout", "3s"}, extra...)...)
		nodes = append(nodes, &ctlNode{id: int64(i), dir: d, p: p, c: newASClient(t, p)})
	}
	m := waitMaster(t, nodes, 0)
	m.c.WaitStatus(t, "every node in the in-sync set", proctest.WaitTimeout, func(st api.Status) error {
		if len(st.InSync) != n {
			return fmt.Errorf("in-sync set %v", st.InSync)
		}
		return nil
	})
	return ctl, nodes
}

// waitMaster waits until the live nodes (all but the broker id skip)
// agree on a master that is one of them, serving puts, and returns it.
func waitMaster(t *testing.T, nodes []*ctlNode, skip int64) *ctlNode {
	t.Helper()
	var master *ctlNode
	proctest.Eventually(t, "a master all nodes agree on", proctest.WaitTimeout, func() error {
		master = nil
		var id int64 = -2
		for _, n := range nodes {
			if n.id == skip {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := n.c.Status(ctx)
			cancel()
			if err != nil {
				return err
			}
			if st.MasterBrokerID == nil || *st.MasterBrokerID < 1 {
				return fmt.Errorf("node %d sees no master (%+v)", n.id, st.Controller)
			}
			if id != -2 && *st.MasterBrokerID != id {
				return fmt.Errorf("nodes disagree: %d and %d", id, *st.MasterBrokerID)
			}
			id = *st.MasterBrokerID
			if n.id == id {
				if !strings.HasSuffix(st.Role, "MASTER") || st.Fenced != "" || st.Controller == nil || !st.Controller.LeaseValid {
					return fmt.Errorf("node %d named master but role %s, fenced %q", n.id, st.Role, st.Fenced)
				}
				master = n
			} else if st.Role != "SLAVE" {
				return fmt.Errorf("node %d: role %s under master %d", n.id, st.Role, id)
			}
		}
		if master == nil {
			return fmt.Errorf("master %d is not a live node", id)
		}
		return nil
	})
	return master
}

// ctlProducer sends sync puts to the group until stop closes, trying the
// nodes in turn and following a 403's Location; it returns the puts
// answered PUT_OK.
func ctlProducer(name string, nodes []*ctlNode, stop <-chan struct{}) []ack {
	hc := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer hc.CloseIdleConnections()
	var acks []ack
	cur := 0
	target := ""
	for i := 0; ; i++ {
		select {
		case <-stop:
			return acks
		default:
		}
		if target == "" {
			target = nodes[cur%len(nodes)].p.API + "/v1/topics/TopicCtl/messages"
			cur++
		}
		body := fmt.Sprintf("%s-%05d", name, i)
		resp, err := hc.Post(target, "application/octet-stream", strings.NewReader(body))
		if err != nil {
			target = ""
			time.Sleep(20 * time.Millisecond)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			var a api.PutAnswer
			if err := json.Unmarshal(b, &a); err == nil && a.Status == "PUT_OK" {
				acks = append(acks, ack{body: body, ans: a})
			}
		case http.StatusForbidden:
			target = resp.Header.Get("Location") // "" when the slave knows no master
		default:
			target = ""
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestNodeFailover: a controller and three `replicator node` processes;
// sync producers; kill -9 of the master; the group elects another member
// of the in-sync set within a few lease TTLs; every PUT_OK message is
// on the new master at its offset; at most one broker acknowledged puts
// per epoch; `put --api A,B,C` finds the master; the old master, its
// unacknowledged tail left behind, rejoins as a slave, truncates and
// ends byte-identical.
func TestNodeFailover(t *testing.T) {
	start := time.Now()
	_, nodes := startGroup(t, 3, "--ha-max-transfer-rate", "256KiB")
	old := waitMaster(t, nodes, 0)
	var slaves []*ctlNode
	for _, n := range nodes {
		if n != old {
			slaves = append(slaves, n)
		}
	}
	// Status: the group's view on a slave names the master's API.
	st := asStatus(t, slaves[0].c)
	if st.Group != ctlGroup || st.MasterAPI != old.p.API || st.Controller == nil || !st.Controller.Registered {
		t.Fatalf("slave status: group %q master_api %q controller %+v", st.Group, st.MasterAPI, st.Controller)
	}
	// A slave's put: 403 naming the master; POST /v1/role: 409.
	code, body := httpDo(t, "POST", slaves[0].p.API+"/v1/topics/T/messages", nil, []byte("x"))
	if code != http.StatusForbidden || !strings.Contains(string(body), old.p.API) {
		t.Fatalf("put on a slave: %d %s", code, body)
	}
	code, body = httpDo(t, "POST", slaves[0].p.API+"/v1/role", nil, []byte(`{"role":"master"}`))
	if code != http.StatusConflict || !strings.Contains(string(body), "controller decides") {
		t.Fatalf("promote in controller mode: %d %s", code, body)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	results := make([][]ack, 3)
	for i := range results {
		wg.Go(func() { results[i] = ctlProducer(fmt.Sprintf("p%d", i), nodes, stop) })
	}
	// Let the producers store a few hundred messages on the first master.
	old.c.WaitStatus(t, "puts on the first master", proctest.WaitTimeout, func(st api.Status) error {
		if st.MaxOffset < 20_000 {
			return fmt.Errorf("max offset %d", st.MaxOffset)
		}
		return nil
	})
	// Large puts: the master appends 2 MiB that its slaves, at 256 KiB/s
	// per connection (--ha-max-transfer-rate), take seconds to receive,
	// and dies with most of it unshipped: its unacknowledged tail.
	appendedAt := asStatus(t, old.c).MaxOffset
	big := make([]byte, 400<<10)
	var bigWG sync.WaitGroup
	for range 5 {
		bigWG.Go(func() {
			hc := &http.Client{Timeout: 10 * time.Second}
			if resp, err := hc.Post(old.p.API+"/v1/topics/TopicBig/messages", "application/octet-stream", bytes.NewReader(big)); err == nil {
				resp.Body.Close()
			}
			hc.CloseIdleConnections()
		})
	}
	var oldMax int64
	proctest.Eventually(t, "an unacknowledged tail on the master", proctest.WaitTimeout, func() error {
		if oldMax = asStatus(t, old.c).MaxOffset; oldMax < appendedAt+5*int64(len(big)) {
			return fmt.Errorf("max offset %d", oldMax)
		}
		return nil
	})
	killed := time.Now()
	old.p.Kill()
	bigWG.Wait()
	nw := waitMaster(t, nodes, old.id)
	elected := time.Since(killed)
	// Let the producers store on the new master, then stop them.
	electedAt := asStatus(t, nw.c).MaxOffset
	nw.c.WaitStatus(t, "puts on the new master", proctest.WaitTimeout, func(st api.Status) error {
		if st.MaxOffset < electedAt+5_000 {
			return fmt.Errorf("max offset %d", st.MaxOffset)
		}
		return nil
	})
	close(stop)
	wg.Wait()
	t.Logf("kill -9 to a new master agreed by the group: %v (lease TTL 2s)", elected.Round(time.Millisecond))
	if elected > 4*2*time.Second {
		t.Fatalf("the election took %v, more than 4 lease TTLs", elected)
	}

	// Every PUT_OK is on the new master at its offset, and no epoch has
	// two acknowledging brokers.
	msgs, err := nw.c.ReadFrom(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	at := map[int64]string{}
	for _, m := range msgs {
		at[m.Offset] = string(m.Body)
	}
	byEpoch := map[int32]int64{}
	total, under := 0, map[int64]int{}
	for _, rs := range results {
		for _, a := range rs {
			total++
			if got, ok := at[a.ans.Offset]; !ok || got != a.body {
				t.Fatalf("PUT_OK %q at offset %d (epoch %d, broker %d): the new master holds %q (%v)", a.body, a.ans.Offset, a.ans.Epoch, a.ans.BrokerID, got, ok)
			}
			if a.ans.Epoch < 1 || a.ans.BrokerID < 1 {
				t.Fatalf("PUT_OK without epoch or broker id: %+v", a.ans)
			}
			if b, ok := byEpoch[a.ans.Epoch]; ok && b != a.ans.BrokerID {
				t.Fatalf("epoch %d acknowledged by brokers %d and %d", a.ans.Epoch, b, a.ans.BrokerID)
			}
			byEpoch[a.ans.Epoch] = a.ans.BrokerID
			under[a.ans.BrokerID]++
		}
	}
	if under[old.id] == 0 || len(under) < 2 {
		t.Fatalf("PUT_OK per broker %v: want some on the old master %d and on a new one", under, old.id)
	}
	t.Logf("%d PUT_OK messages checked (per broker %v), epochs %v", total, under, byEpoch)

	// put --api A,B,C: the dead old master, a slave, then follows.
	var slave *ctlNode
	for _, s := range slaves {
		if s != nw {
			slave = s
		}
	}
	exit, out, errOut := runCLI(t, "", "put", "--api", strings.Join([]string{old.p.API, slave.p.API}, ","), "--timeout", "20s", "via-the-cli")
	if exit != 0 || !strings.HasPrefix(out, "PUT_OK offset=") {
		t.Fatalf("put --api A,B: exit %d, %q, %q", exit, out, errOut)
	}

	// The old master restarts: a slave of the new master, its tail cut.
	oldEntries, newEntries := readEpochs(t, old.dir), readEpochs(t, nw.dir)
	oldLast := oldEntries[len(oldEntries)-1]
	var newStart int64 = -1 // where the new master's log leaves the old master's last epoch
	for _, e := range newEntries {
		if e.Epoch > oldLast.Epoch {
			newStart = e.StartOffset
			break
		}
	}
	if newStart < 0 {
		t.Fatalf("the new master's epochs %v have none after the old master's last %v", newEntries, oldLast)
	}
	old.p.Restart()
	if cur := waitMaster(t, nodes, 0); cur != nw {
		t.Fatalf("master %d after the old master's restart, want %d", cur.id, nw.id)
	}
	ost := waitFollowing(t, old.c, nw.c)
	{
		// Small puts may have landed after the last status read.
		tr := ost.Master.LastTruncation
		if oldMax <= newStart || tr == nil || tr.From < oldMax || tr.To != newStart {
			t.Fatalf("the old master (max offset %d or more) truncated %+v, want down to %d", oldMax, tr, newStart)
		}
		t.Logf("the old master cut its unacknowledged tail: %d -> %d (%d records)", tr.From, tr.To, tr.Records)
	}
	if ost.Group != ctlGroup || ost.MasterBrokerID == nil || *ost.MasterBrokerID != nw.id {
		t.Fatalf("the old master's status after rejoining: group %q master %d, want %d", ost.Group, *ost.MasterBrokerID, nw.id)
	}
	ns := asStatus(t, nw.c)
	for _, n := range nodes {
		if n == nw {
			continue
		}
		waitFollowing(t, n.c, nw.c)
		if _, err := proctest.CompareCommitLogs(filepath.Join(n.dir, "commitlog"), filepath.Join(nw.dir, "commitlog"), ns.SegmentSize, ns.MinOffset, ns.MaxOffset); err != nil {
			t.Fatalf("node %d: %v", n.id, err)
		}
		if got, want := readEpochs(t, n.dir), readEpochs(t, nw.dir); !slices.Equal(got, want) {
			t.Fatalf("node %d epochs %v, master %v", n.id, got, want)
		}
	}
	// The node records "slave" on a goroutine of its own once its slave
	// reaches TRANSFER (internal/node slaveConnected), so the status can
	// say TRANSFER a moment before the file does.
	eventually(t, "the old master's role file says slave", func() error {
		if role, ok, err := readRole(old.dir); err != nil || !ok || role != "slave" {
			return fmt.Errorf("role file: %q %v %v", role, ok, err)
		}
		return nil
	})
	t.Logf("TestNodeFailover ran %v", time.Since(start).Round(time.Millisecond))
}

// TestNodeGracefulStop: SIGTERM on the master revokes its lease and the
// group elects another master at once, without waiting for the TTL.
func TestNodeGracefulStop(t *testing.T) {
	_, nodes := startGroup(t, 2, "--lease-ttl", "10s")
	m := waitMaster(t, nodes, 0)
	asPut(t, m.c, "before", 3)
	stopped := time.Now()
	m.p.Stop()
	nw := waitMaster(t, nodes, m.id)
	if d := time.Since(stopped); d > 5*time.Second {
		t.Fatalf("a new master after %v: the lease (10s) was not revoked", d)
	}
	a := asPut(t, nw.c, "after", 1)
	if a.BrokerID != nw.id || a.Epoch < 2 {
		t.Fatalf("put on the new master: %+v", a)
	}
	if l := m.p.ReadLog(); !strings.Contains(l, "left the group: lease revoked") {
		t.Fatal("the stopped master does not log leaving the group")
	}
}

func readEpochs(t *testing.T, dir string) []epoch.Entry {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, epoch.FileName))
	if err != nil {
		t.Fatal(err)
	}
	es, err := epoch.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return es
}
