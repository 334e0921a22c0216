package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/ctltest"
	"github.com/replicatorhq/replicator/internal/pluginhost"
	"github.com/replicatorhq/replicator/sdk/record"
)

func batchOf(bodies ...string) []*record.Message {
	msgs := make([]*record.Message, len(bodies))
	for i, b := range bodies {
		msgs[i] = &record.Message{Topic: "T", Body: []byte(b)}
	}
	return msgs
}

// TestBackendPutBatchModes: the API's batch put is the core's own in each
// mode. An autoswitch master stores the batch in order; demoted, the same
// node refuses every message as its replica's slave (ErrNotMaster wrapping
// ErrSlaveWriteProtected) without storing; a classic master stores the
// batch and a classic slave refuses each message.
func TestBackendPutBatchModes(t *testing.T) {
	dir := t.TempDir()
	base := Config{Listen: "127.0.0.1:0", SegmentSize: 1 << 20, Registry: pluginhost.Builtin(), Version: "test",
		ReconnectDelay: 20 * time.Millisecond, HAReportInterval: 100 * time.Millisecond, HAListen: "127.0.0.1:0"}
	ctx := context.Background()
	wantStored := func(mode string, n *Node, out []core.BatchPut) {
		t.Helper()
		var prev int64
		for i, o := range out {
			if o.Err != nil || o.Status != core.PutOK || o.Offset != prev || o.NextOffset <= o.Offset {
				t.Fatalf("%s: message %d: %+v %v (previous ended at %d)", mode, i, o.PutResult, o.Err, prev)
			}
			prev = o.NextOffset
		}
		if len(out) != 3 || prev != n.st.Bounds().Max {
			t.Fatalf("%s: %d results ending at %d, log max %d", mode, len(out), prev, n.st.Bounds().Max)
		}
	}
	wantRefused := func(mode string, n *Node, out []core.BatchPut, errs ...error) {
		t.Helper()
		before := n.st.Bounds().Max
		if len(out) != 2 {
			t.Fatalf("%s: %d results for 2 messages", mode, len(out))
		}
		for i, o := range out {
			for _, want := range errs {
				if !errors.Is(o.Err, want) || o.NextOffset != 0 {
					t.Fatalf("%s: message %d: %+v %v, want %v", mode, i, o.PutResult, o.Err, want)
				}
			}
		}
		if n.st.Bounds().Max != before {
			t.Fatalf("%s: a refused batch was stored", mode)
		}
	}

	ac := base
	ac.Protocol, ac.Role, ac.DataDir, ac.BrokerID = core.ProtocolAutoSwitch, core.AsyncMaster, filepath.Join(dir, "a"), 1
	a := startNode(t, ac)
	wantStored("autoswitch master", a.n, a.n.batchPut()(ctx, batchOf("a", "bb", "ccc")))
	if err := a.n.ChangeRole(ctx, api.RoleRequest{Role: api.RoleSlave, Master: "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	wantRefused("autoswitch slave", a.n, a.n.batchPut()(ctx, batchOf("x", "y")), core.ErrNotMaster, core.ErrSlaveWriteProtected)
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}

	mc := base
	mc.Role, mc.DataDir = core.AsyncMaster, filepath.Join(dir, "m")
	m := startNode(t, mc)
	wantStored("classic master", m.n, m.n.batchPut()(ctx, batchOf("a", "bb", "ccc")))
	sc := base
	// The slave refuses puts whether or not it reaches a master.
	sc.Role, sc.DataDir, sc.MasterHA, sc.HAListen = core.Slave, filepath.Join(dir, "s"), "127.0.0.1:1", ""
	s := startNode(t, sc)
	wantRefused("classic slave", s.n, s.n.batchPut()(ctx, batchOf("x", "y")), core.ErrSlaveWriteProtected)
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if err := m.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestBackendPutBatchController: in controller mode the batch goes
// through the member (its lease rules) and, on the master, is stored in
// order; on the slave every message answers the 403 redirect naming the
// master, as the member's single put does.
func TestBackendPutBatchController(t *testing.T) {
	store := ctltest.StartController(t)
	dir := t.TempDir()
	a := startNode(t, controllerNode(t, store, dir, 1))
	b := startNode(t, controllerNode(t, store, dir, 2))
	var master, slave *started
	eventually(t, "a master with its slave in sync, and the slave knowing it", 10*time.Second, func() error {
		sa, sb := a.n.member.Status(), b.n.member.Status()
		switch {
		case sa.Role == core.RoleMaster && sb.Role == core.RoleSlave:
			master, slave = a, b
		case sb.Role == core.RoleMaster && sa.Role == core.RoleSlave:
			master, slave = b, a
		default:
			return fmt.Errorf("roles %v %v", sa.Role, sb.Role)
		}
		ms, ss := master.n.member.Status(), slave.n.member.Status()
		if ss.MasterAPI == "" || !ms.LeaseValid || len(ms.InSyncSet) != 2 {
			return fmt.Errorf("master's view %+v, slave's %+v", ms, ss)
		}
		return nil
	})
	ctx := context.Background()
	out := master.n.batchPut()(ctx, batchOf("a", "bb", "ccc"))
	var prev int64 = -1
	for i, o := range out {
		if o.Err != nil || o.Status != core.PutOK || o.Offset <= prev || o.NextOffset <= o.Offset {
			t.Fatalf("master: message %d: %+v %v", i, o.PutResult, o.Err)
		}
		prev = o.Offset
	}
	if len(out) != 3 || out[2].NextOffset != master.n.st.Bounds().Max {
		t.Fatalf("master: %d results, log max %d", len(out), master.n.st.Bounds().Max)
	}
	wantAPI := slave.n.member.Status().MasterAPI
	out = slave.n.batchPut()(ctx, batchOf("x", "y"))
	for i, o := range out {
		var re *api.RedirectError
		if !errors.As(o.Err, &re) || re.MasterAPI != wantAPI || !errors.Is(o.Err, core.ErrSlaveWriteProtected) || o.NextOffset != 0 {
			t.Fatalf("slave: message %d: %+v %v, want a redirect to %s", i, o.PutResult, o.Err, wantAPI)
		}
	}
	if len(out) != 2 {
		t.Fatalf("slave: %d results for 2 messages", len(out))
	}
	if err := slave.stop(); err != nil {
		t.Fatal(err)
	}
	if err := master.stop(); err != nil {
		t.Fatal(err)
	}
}
