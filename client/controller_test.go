package client_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/client"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/ctltest"
	"github.com/replicatorhq/replicator/internal/node"
)

// TestControllerFailover: producers that know the three nodes of a
// controller-mode group keep sending while the master stops (it leaves
// the group and the controller elects another member at a higher epoch).
// They start on a slave, whose answers name the master; after the stop
// they find the new master through the addresses, the slaves' answers
// and, while no master is known, the retried "no master" answers. Every
// PUT_OK, of either epoch, is in the new master's log at its offset.
func TestControllerFailover(t *testing.T) {
	store := ctltest.StartController(t)
	dir := t.TempDir()
	nodes := map[int64]*node.Node{}
	stops := map[int64]func(){}
	for id := int64(1); id <= 3; id++ {
		nodes[id], stops[id] = runNode(t, node.Config{Role: core.SyncMaster, PromoteRole: core.SyncMaster, Protocol: core.ProtocolAutoSwitch,
			BrokerID: id, DataDir: filepath.Join(dir, fmt.Sprint(id)), HAListen: ctltest.FreeAddr(t), SlaveTimeout: 3 * time.Second,
			ReconnectDelay: 20 * time.Millisecond, HAReportInterval: 50 * time.Millisecond,
			// A 3 s lease: a busy machine does not miss renewals and fence a
			// healthy master; the stopped master revokes its lease, so the
			// failover does not wait for it.
			Controller: &node.ControllerConfig{Store: store, Group: "g", LeaseTTL: 3 * time.Second}})
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

	ps := startProducers(p, 4, func(body string, res client.Result) error {
		return fmt.Errorf("%s: stored with %v", body, res.Status)
	})
	countFrom := func(id int64) int {
		n := 0
		for _, o := range ps.answers() {
			if o.res.BrokerID == id {
				n++
			}
		}
		return n
	}
	var elected int64
	ps.waitFor(t, "PUT_OK on the first master", func() bool { return countFrom(first) >= 50 })
	stops[first]()
	ps.waitFor(t, "PUT_OK on a new master", func() bool {
		for id := int64(1); id <= 3; id++ {
			if id != first && countFrom(id) >= 50 {
				elected = id
				return true
			}
		}
		return false
	})
	oks, maybe := ps.finish(t)

	log := readBodies(t, nodes[elected].URL())
	var epochFirst, epochNew int32
	for _, o := range oks {
		if off, found := log[o.body]; !found || off != o.res.Offset {
			t.Fatalf("PUT_OK %q at %d (broker %d, epoch %d) is not in the new master's log (%d, %v)", o.body, o.res.Offset, o.res.BrokerID, o.res.Epoch, off, found)
		}
		switch r := o.res; r.BrokerID {
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
