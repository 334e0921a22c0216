package client_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/replicatorhq/replicator/client"
	"github.com/replicatorhq/replicator/controller/embedetcd"
	"github.com/replicatorhq/replicator/controller/etcdstore"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/node"
)

// startController runs an embedded etcd member and the supervisor of its
// groups (what `replicator controller` runs), and returns a controller
// store on a client of its own.
func startController(t *testing.T) *etcdstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := embedetcd.Start(ctx, embedetcd.Config{Dir: t.TempDir(), ClientAddr: "127.0.0.1:0", ElectionMs: 500, TickMs: 50})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	st, err := etcdstore.New(etcdstore.Config{Client: cli})
	if err != nil {
		cli.Close()
		srv.Close()
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.Supervise(sctx, "", nil)
	}()
	t.Cleanup(func() {
		stop()
		<-done
		cli.Close()
		srv.Close()
	})
	return st
}

// TestControllerFailover: producers that know the three nodes of a
// controller-mode group keep sending while the master stops (it leaves
// the group and the controller elects another member at a higher epoch).
// They start on a slave, whose answers name the master; after the stop
// they find the new master through the addresses, the slaves' answers
// and, while no master is known, the retried "no master" answers. Every
// PUT_OK, of either epoch, is in the new master's log at its offset.
func TestControllerFailover(t *testing.T) {
	store := startController(t)
	dir := t.TempDir()
	nodes := map[int64]*node.Node{}
	stops := map[int64]func(){}
	for id := int64(1); id <= 3; id++ {
		nodes[id], stops[id] = runNode(t, node.Config{Role: core.SyncMaster, PromoteRole: core.SyncMaster, Protocol: core.ProtocolAutoSwitch,
			BrokerID: id, DataDir: filepath.Join(dir, fmt.Sprint(id)), HAListen: haAddr(t), SlaveTimeout: 3 * time.Second,
			ReconnectDelay: 20 * time.Millisecond, HAReportInterval: 50 * time.Millisecond,
			Controller: &node.ControllerConfig{Store: store, Group: "g", LeaseTTL: time.Second}})
	}
	t.Cleanup(hc.CloseIdleConnections)
	var first int64
	deadline := time.Now().Add(20 * time.Second)
	for {
		var st api.Status
		getJSON(t, nodes[1].URL()+"/v1/status", &st)
		if st.MasterBrokerID != nil && *st.MasterBrokerID > 0 {
			var ms api.Status
			getJSON(t, nodes[*st.MasterBrokerID].URL()+"/v1/status", &ms)
			if ms.Role == "SYNC_MASTER" && len(ms.InSync) == 3 {
				first = *st.MasterBrokerID
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no master with a full in-sync set: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The slaves first: the producer follows a slave's answer.
	var addrs []string
	for id := int64(1); id <= 3; id++ {
		if id != first {
			addrs = append(addrs, nodes[id].URL())
		}
	}
	p := dial(t, append(addrs, nodes[first].URL()), client.WithRetryTimeout(20*time.Second))

	var (
		mu    sync.Mutex
		oks   []client.Result
		bods  []string
		maybe int
	)
	countFrom := func(id int64) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range oks {
			if r.BrokerID == id {
				n++
			}
		}
		return n
	}
	stop := make(chan struct{})
	errc := make(chan error, 4)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				body := fmt.Sprintf("g%d-%d", g, i)
				res, err := p.Send(context.Background(), &client.Message{Topic: "TopicTest", Body: []byte(body)})
				switch {
				case err == nil && res.Status == client.PutOK:
					mu.Lock()
					oks, bods = append(oks, res), append(bods, body)
					mu.Unlock()
				case errors.Is(err, client.ErrMayBeStored):
					// In flight when the master stopped or fenced itself.
					mu.Lock()
					maybe++
					mu.Unlock()
				case err != nil:
					errc <- fmt.Errorf("%s: %w", body, err)
					return
				default:
					errc <- fmt.Errorf("%s: stored with %v", body, res.Status)
					return
				}
			}
		})
	}
	var elected int64
	waitFor := func(what string, cond func() bool) { waitProducers(t, what, cond, errc, stop, &wg) }
	waitFor("PUT_OK on the first master", func() bool { return countFrom(first) >= 50 })
	stops[first]()
	waitFor("PUT_OK on a new master", func() bool {
		for id := int64(1); id <= 3; id++ {
			if id != first && countFrom(id) >= 50 {
				elected = id
				return true
			}
		}
		return false
	})
	close(stop)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}

	log := readBodies(t, nodes[elected].URL())
	var epochFirst, epochNew int32
	for i, r := range oks {
		if off, found := log[bods[i]]; !found || off != r.Offset {
			t.Fatalf("PUT_OK %q at %d (broker %d, epoch %d) is not in the new master's log (%d, %v)", bods[i], r.Offset, r.BrokerID, r.Epoch, off, found)
		}
		switch r.BrokerID {
		case first:
			epochFirst = max(epochFirst, r.Epoch)
		case elected:
			epochNew = r.Epoch
		default:
			t.Fatalf("PUT_OK from broker %d, neither the first master %d nor the new one %d", r.BrokerID, first, elected)
		}
	}
	if epochFirst < 1 || epochNew <= epochFirst {
		t.Fatalf("epochs: first master %d, new master %d", epochFirst, epochNew)
	}
	t.Logf("%d PUT_OK (%d from broker %d at epoch %d, %d from broker %d at epoch %d), %d may be stored",
		len(oks), countFrom(first), first, epochFirst, countFrom(elected), elected, epochNew, maybe)
}
