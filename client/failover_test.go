package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/client"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/ctltest"
	"github.com/replicatorhq/replicator/internal/node"
)

func postRole(t *testing.T, url, body string) {
	t.Helper()
	resp, err := hc.Post(url+"/v1/role", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s/v1/role %s: %d %s", url, body, resp.StatusCode, b)
	}
}

// TestFollowsMasterAcrossFailover: producers that know only the first
// master keep sending while the roles of an autoswitch pair swap (the
// master demoted to a slave of the other node, which is promoted). The
// demoted master's NOT_MASTER answers name the new master, the producers
// follow, and every PUT_OK, of either epoch, is in the new master's log at
// its offset, and in the old master's once it caught up.
func TestFollowsMasterAcrossFailover(t *testing.T) {
	dir := t.TempDir()
	aHA, bHA := ctltest.FreeAddr(t), ctltest.FreeAddr(t)
	a, _ := runNode(t, node.Config{Role: core.SyncMaster, Protocol: core.ProtocolAutoSwitch, BrokerID: 1, DataDir: filepath.Join(dir, "a"),
		HAListen: aHA, SlaveTimeout: 3 * time.Second, ReconnectDelay: 20 * time.Millisecond, HAReportInterval: 50 * time.Millisecond})
	b, _ := runNode(t, node.Config{Role: core.Slave, PromoteRole: core.SyncMaster, Protocol: core.ProtocolAutoSwitch, BrokerID: 2,
		DataDir: filepath.Join(dir, "b"), HAListen: bHA, MasterHA: aHA, MasterAPI: a.URL(),
		SlaveTimeout: 3 * time.Second, ReconnectDelay: 20 * time.Millisecond, HAReportInterval: 50 * time.Millisecond})
	t.Cleanup(hc.CloseIdleConnections)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st api.Status
		getJSON(t, a.URL()+"/v1/status", &st)
		if len(st.InSync) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slave did not join the in-sync set: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}

	p := dial(t, []string{a.URL()}, client.WithRetryTimeout(20*time.Second))
	// Other statuses are not counted: a put may wait for the slave while
	// the roles swap.
	ps := startProducers(p, 4, func(string, client.Result) error { return nil })
	count := func(node string) int {
		n := 0
		for _, o := range ps.answers() {
			if o.res.Node == node {
				n++
			}
		}
		return n
	}
	ps.waitFor(t, "PUT_OK on the first master", func() bool { return count(a.Addr()) >= 50 })
	// The failover: demote a (it names b), then promote b.
	postRole(t, a.URL(), `{"role":"slave","master":"`+bHA+`","master_api":"`+b.URL()+`"}`)
	postRole(t, b.URL(), `{"role":"master"}`)
	ps.waitFor(t, "PUT_OK on the new master", func() bool { return count(b.Addr()) >= 50 })
	oks, maybe := ps.finish(t)

	logB := readBodies(t, b.URL())
	var epochA, epochB int32
	for _, o := range oks {
		if off, found := logB[o.body]; !found || off != o.res.Offset {
			t.Fatalf("PUT_OK %q at %d (node %s, epoch %d) is not in the new master's log (%d, %v)", o.body, o.res.Offset, o.res.Node, o.res.Epoch, off, found)
		}
		switch o.res.Node {
		case a.Addr():
			epochA = o.res.Epoch
			if o.res.BrokerID != 1 {
				t.Fatalf("PUT_OK from the first master with broker id %d", o.res.BrokerID)
			}
		case b.Addr():
			epochB = o.res.Epoch
			if o.res.BrokerID != 2 {
				t.Fatalf("PUT_OK from the new master with broker id %d", o.res.BrokerID)
			}
		}
	}
	if epochA < 1 || epochB <= epochA {
		t.Fatalf("epochs: first master %d, new master %d", epochA, epochB)
	}
	if a := p.Addrs(); a[0] != b.Addr() {
		t.Fatalf("addresses %v: the new master is not the target", a)
	}
	// The old master catches up to the same log.
	var stB api.Status
	getJSON(t, b.URL()+"/v1/status", &stB)
	deadline = time.Now().Add(10 * time.Second)
	for {
		var st api.Status
		getJSON(t, a.URL()+"/v1/status", &st)
		if st.MaxOffset == stB.MaxOffset {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old master did not catch up: %d of %d", st.MaxOffset, stB.MaxOffset)
		}
		time.Sleep(10 * time.Millisecond)
	}
	logA := readBodies(t, a.URL())
	for _, o := range oks {
		if logA[o.body] != o.res.Offset {
			t.Fatalf("PUT_OK %q at %d is not in the old master's log after the catch-up", o.body, o.res.Offset)
		}
	}
	t.Logf("%d PUT_OK (%d on the first master at epoch %d, %d on the new at epoch %d), %d may be stored",
		len(oks), count(a.Addr()), epochA, count(b.Addr()), epochB, maybe)
}

// sent is a PUT_OK answer of a producer and the body it sent.
type sent struct {
	body string
	res  client.Result
}

// producers are goroutines sending through one client.Producer while a
// test moves the group's master.
type producers struct {
	stop  chan struct{}
	wg    sync.WaitGroup
	errc  chan error
	mu    sync.Mutex
	oks   []sent
	maybe int
}

// startProducers starts n goroutines that each send "g<g>-<i>" to
// TopicTest through p until finish: PUT_OK answers are recorded,
// ErrMayBeStored answers (in flight when a master stopped, fenced itself
// or was demoted) are counted, and any other error stops that goroutine
// and fails the test at the next waitFor or finish. An answer with another
// status goes to other, whose error does the same.
func startProducers(p *client.Producer, n int, other func(body string, res client.Result) error) *producers {
	ps := &producers{stop: make(chan struct{}), errc: make(chan error, n)}
	for g := range n {
		ps.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-ps.stop:
					return
				default:
				}
				body := fmt.Sprintf("g%d-%d", g, i)
				res, err := p.Send(context.Background(), &client.Message{Topic: "TopicTest", Body: []byte(body)})
				switch {
				case err == nil && res.Status == client.PutOK:
					ps.mu.Lock()
					ps.oks = append(ps.oks, sent{body, res})
					ps.mu.Unlock()
				case errors.Is(err, client.ErrMayBeStored):
					ps.mu.Lock()
					ps.maybe++
					ps.mu.Unlock()
				case err != nil:
					ps.errc <- fmt.Errorf("%s: %w", body, err)
					return
				default:
					if err := other(body, res); err != nil {
						ps.errc <- err
						return
					}
				}
			}
		})
	}
	return ps
}

// answers returns the PUT_OK answers so far.
func (ps *producers) answers() []sent {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return slices.Clone(ps.oks)
}

// waitFor polls cond until it holds; a producer's error or 20 s without
// cond stop the producers and fail t.
func (ps *producers) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		select {
		case err := <-ps.errc:
			close(ps.stop)
			ps.wg.Wait()
			t.Fatal(err)
		default:
		}
		if time.Now().After(deadline) {
			close(ps.stop)
			ps.wg.Wait()
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// finish stops the producers, fails t on a producer's error, and returns
// the PUT_OK answers and the count of ErrMayBeStored answers.
func (ps *producers) finish(t *testing.T) ([]sent, int) {
	t.Helper()
	close(ps.stop)
	ps.wg.Wait()
	select {
	case err := <-ps.errc:
		t.Fatal(err)
	default:
	}
	return ps.oks, ps.maybe
}
