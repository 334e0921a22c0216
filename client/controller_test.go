package client_test

import (
	"fmt"
	"math"
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
// PUT_OK, of any epoch, is in the log of the master at the end (the new
// one, or a later one if the group failed over again) at its offset, and
// every later master's epoch is above the first's.
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

	// The group's master now: on a busy machine the group may have failed
	// over more than once. Whichever it is, the controller elected it from
	// the in-sync set, so it holds every PUT_OK.
	last := elected
	deadline = time.Now().Add(20 * time.Second)
	for {
		var st api.Status
		getJSON(t, nodes[elected].URL()+"/v1/status", &st)
		if id := st.MasterBrokerID; id != nil && *id > 0 && *id != first {
			var ms api.Status
			getJSON(t, nodes[*id].URL()+"/v1/status", &ms)
			if ms.Role == "SYNC_MASTER" && ms.Fenced == "" {
				last = *id
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no master after the failover: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	log := readBodies(t, nodes[last].URL())
	var epochFirst, epochNew int32
	epochNew = math.MaxInt32
	for _, o := range oks {
		if off, found := log[o.body]; !found || off != o.res.Offset {
			t.Fatalf("PUT_OK %q at %d (broker %d, epoch %d) is not in the master's log (broker %d: %d, %v)", o.body, o.res.Offset, o.res.BrokerID, o.res.Epoch, last, off, found)
		}
		if o.res.BrokerID == first {
			epochFirst = max(epochFirst, o.res.Epoch)
		} else {
			epochNew = min(epochNew, o.res.Epoch)
		}
	}
	if epochFirst < 1 || epochNew <= epochFirst {
		t.Fatalf("epochs: first master up to %d, the later masters from %d", epochFirst, epochNew)
	}
	t.Logf("%d PUT_OK (%d from broker %d up to epoch %d, %d from broker %d from epoch %d), master at the end %d, %d may be stored",
		len(oks), countFrom(first), first, epochFirst, countFrom(elected), elected, epochNew, last, maybe)
}
