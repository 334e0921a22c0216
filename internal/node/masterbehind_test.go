package node

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/pluginhost"
)

// gaugeValue is the value of the unlabelled gauge name in n's registry.
func gaugeValue(t *testing.T, n *Node, name string) (float64, bool) {
	t.Helper()
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestClassicSlaveLongerThanMaster starts a classic slave on a data
// directory holding more than its master's log (over real TCP): the master
// sends heartbeats only, and the slave finds out through the master's API
// (--master-api): status names it, /readyz?following answers 503 and
// replicator_node_master_behind is 1. Once the master's log passes the
// slave's, all three clear.
func TestClassicSlaveLongerThanMaster(t *testing.T) {
	dir := t.TempDir()
	hc := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	base := Config{Listen: "127.0.0.1:0", SegmentSize: 1 << 20, Registry: pluginhost.Builtin(), Version: "test"}

	// dir A: a master with 20 messages, stopped.
	ac := base
	ac.Role, ac.DataDir, ac.HAListen = core.AsyncMaster, filepath.Join(dir, "a"), "127.0.0.1:0"
	a := startNode(t, ac)
	putN(t, hc, a.n.URL(), 20, nil)
	aMax := nodeStatus(t, hc, a.n.URL()).MaxOffset
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}

	// dir B: another master with 5.
	bc := base
	bc.Role, bc.DataDir, bc.HAListen = core.AsyncMaster, filepath.Join(dir, "b"), "127.0.0.1:0"
	b := startNode(t, bc)
	putN(t, hc, b.n.URL(), 5, nil)
	bMax := nodeStatus(t, hc, b.n.URL()).MaxOffset
	if bMax >= aMax {
		t.Fatalf("B's log (%d) is not shorter than A's (%d)", bMax, aMax)
	}

	// A classic slave on dir A following B.
	var logs logBuf
	sc := base
	sc.Role, sc.DataDir, sc.MasterHA, sc.MasterAPI = core.Slave, ac.DataDir, b.n.master.Addr(), b.n.URL()
	sc.AllowDivergedRejoin = true
	sc.HAReportInterval = 200 * time.Millisecond
	sc.ReconnectDelay = 100 * time.Millisecond
	sc.Logger = logs.logger()
	s := startNode(t, sc)

	want := fmt.Sprintf("master's log ends at %d, this slave's at %d", bMax, aMax)
	eventually(t, "status names the divergence", 10*time.Second, func() error {
		st := nodeStatus(t, hc, s.n.URL())
		if st.Master == nil || !st.Master.Connected || !strings.Contains(st.Master.Diverged, want) {
			return fmt.Errorf("master link %+v", st.Master)
		}
		return nil
	})
	resp, err := hc.Get(s.n.URL() + "/readyz?following")
	if err != nil {
		t.Fatal(err)
	}
	var ra api.ReadyAnswer
	err = json.NewDecoder(resp.Body).Decode(&ra)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable || ra.Status != "not following" || !strings.Contains(ra.Error, want) {
		t.Fatalf("/readyz?following: %d %+v %v", resp.StatusCode, ra, err)
	}
	if v, ok := gaugeValue(t, s.n, "replicator_node_master_behind"); !ok || v != 1 {
		t.Fatalf("replicator_node_master_behind = %v (registered %v), want 1", v, ok)
	}
	// Several intervals later still one ERROR line.
	time.Sleep(5 * sc.HAReportInterval)
	if got := logs.lines("[ERROR]", "longer or diverged"); len(got) != 1 {
		t.Fatalf("ERROR lines about the divergence: %q", got)
	}

	// B's log passes A's: the condition no longer holds.
	putN(t, hc, b.n.URL(), 40, nil)
	eventually(t, "divergence cleared", 10*time.Second, func() error {
		st := nodeStatus(t, hc, s.n.URL())
		if st.Master == nil || st.Master.Diverged != "" {
			return fmt.Errorf("master link %+v", st.Master)
		}
		if v, _ := gaugeValue(t, s.n, "replicator_node_master_behind"); v != 0 {
			return fmt.Errorf("replicator_node_master_behind = %v", v)
		}
		return nil
	})
	if got := logs.lines("[INFO]", "no longer"); len(got) != 1 {
		t.Fatalf("INFO lines about the cleared divergence: %q", got)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestClassicSlaveNoMasterAPI: without --master-api the slave says once at
// start that the check is off.
func TestClassicSlaveNoMasterAPI(t *testing.T) {
	dir := t.TempDir()
	base := Config{Listen: "127.0.0.1:0", SegmentSize: 1 << 20, Registry: pluginhost.Builtin(), Version: "test"}
	mc := base
	mc.Role, mc.DataDir, mc.HAListen = core.AsyncMaster, filepath.Join(dir, "m"), "127.0.0.1:0"
	m := startNode(t, mc)
	var logs logBuf
	sc := base
	sc.Role, sc.DataDir, sc.MasterHA = core.Slave, filepath.Join(dir, "s"), m.n.master.Addr()
	sc.Logger = logs.logger()
	s := startNode(t, sc)
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if got := logs.lines("check is off", "--master-api"); len(got) != 1 {
		t.Fatalf("log lines about the check being off: %q\n%s", got, logs.String())
	}
}
