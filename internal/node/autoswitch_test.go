package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/pluginhost"
)

func postJSON(t *testing.T, hc *http.Client, url, body string) (int, string) {
	t.Helper()
	resp, err := hc.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestNodeAutoSwitchInProcess runs an autoswitch master and slave in this
// process: the master takes epoch 1 and records its role, the slave
// follows and records its role once in TRANSFER, the OnMasterConnect hook
// runs from core's OnConnect (no polling), the status shows the autoswitch
// fields, and a demote/promote through POST /v1/role swaps the roles; both
// shut down without leaking goroutines (TestMain's goleak).
func TestNodeAutoSwitchInProcess(t *testing.T) {
	dir := t.TempDir()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	base := Config{Listen: "127.0.0.1:0", SegmentSize: 1 << 20, Registry: pluginhost.Builtin(), Version: "test",
		Protocol: core.ProtocolAutoSwitch, ReconnectDelay: 20 * time.Millisecond, HAReportInterval: 100 * time.Millisecond}

	mc := base
	mc.Role, mc.DataDir, mc.HAListen, mc.BrokerID = core.SyncMaster, filepath.Join(dir, "m"), "127.0.0.1:0", 11
	m := startNode(t, mc)
	mURL := m.n.URL()
	mst := nodeStatus(t, hc, mURL)
	if mst.Protocol != "autoswitch" || mst.Epoch != 1 || mst.EpochEntries != 1 || mst.BrokerID != 11 || mst.Role != "SYNC_MASTER" {
		t.Fatalf("master status %+v", mst)
	}
	if rec, ok, err := ReadRoleFile(mc.DataDir); err != nil || !ok || rec.Role != RoleMaster || rec.Epoch != 1 || rec.BrokerID != 11 || rec.Protocol != "autoswitch" {
		t.Fatalf("master role file %+v %v %v", rec, ok, err)
	}

	var hooks atomic.Int32
	ext := &hookExt{onConnect: func() { hooks.Add(1) }}
	sc := base
	sc.Role, sc.DataDir, sc.MasterHA, sc.BrokerID = core.Slave, filepath.Join(dir, "s"), mst.HAAddr, 22
	sc.HAListen, sc.PromoteRole = "127.0.0.1:0", core.SyncMaster
	sc.Extensions = []Extension{ext}
	s := startNode(t, sc)
	sURL := s.n.URL()
	eventually(t, "slave in TRANSFER and in the in-sync set", 10*time.Second, func() error {
		st := nodeStatus(t, hc, mURL)
		if len(st.Slaves) != 1 || !st.Slaves[0].InSync || st.Slaves[0].BrokerID != 22 || st.Slaves[0].HandshakeState != "TRANSFER" || len(st.InSync) != 2 {
			return fmt.Errorf("master status %+v", st)
		}
		return nil
	})
	eventually(t, "OnMasterConnect hook and role file", 10*time.Second, func() error {
		rec, ok, err := ReadRoleFile(sc.DataDir)
		if hooks.Load() != 1 || err != nil || !ok || rec.Role != RoleSlave || rec.BrokerID != 22 {
			return fmt.Errorf("hooks %d, role file %+v %v %v", hooks.Load(), rec, ok, err)
		}
		return nil
	})
	if s.n.stopBehind != nil {
		t.Fatal("an autoswitch slave runs the classic slave's polling master-log check")
	}
	for i := range 5 {
		if code, body := postJSON(t, hc, mURL+"/v1/topics/T/messages", fmt.Sprint("m", i)); code != 200 || !strings.Contains(body, "PUT_OK") {
			t.Fatalf("put %d: %d %s", i, code, body)
		}
	}
	sst := nodeStatus(t, hc, sURL)
	if sst.Protocol != "autoswitch" || sst.BrokerID != 22 || sst.Master == nil || sst.Master.HandshakeState != "TRANSFER" {
		t.Fatalf("slave status %+v %+v", sst, sst.Master)
	}

	// Swap the roles. The slave's HA listener (port 0) binds only at the
	// promote: demote the master to a placeholder address first, promote
	// the slave, then point the old master at the new one.
	if code, body := postJSON(t, hc, mURL+"/v1/role", `{"role":"slave","master":"127.0.0.1:1"}`); code != 200 || !strings.Contains(body, `"role":"SLAVE"`) {
		t.Fatalf("demote: %d %s", code, body)
	}
	if code, body := postJSON(t, hc, mURL+"/v1/topics/T/messages", "refused"); code != http.StatusForbidden {
		t.Fatalf("put on the demoted master: %d %s", code, body)
	}
	code, body := postJSON(t, hc, sURL+"/v1/role", `{"role":"master"}`)
	if code != 200 || !strings.Contains(body, `"epoch":2`) || !strings.Contains(body, `"role":"SYNC_MASTER"`) {
		t.Fatalf("promote: %d %s", code, body)
	}
	if code, body := postJSON(t, hc, sURL+"/v1/role", `{"role":"master"}`); code != http.StatusConflict || !strings.Contains(body, "already the master of epoch 2") {
		t.Fatalf("second promote: %d %s", code, body)
	}
	newHA := nodeStatus(t, hc, sURL).HAAddr
	if code, body := postJSON(t, hc, mURL+"/v1/role", `{"role":"slave","master":"`+newHA+`"}`); code != 200 {
		t.Fatalf("point the old master at the new one: %d %s", code, body)
	}
	if code, body := postJSON(t, hc, mURL+"/v1/role", `{"role":"slave","master":"`+newHA+`"}`); code != http.StatusConflict || !strings.Contains(body, "already a slave of") {
		t.Fatalf("same demote twice: %d %s", code, body)
	}
	if code, body := postJSON(t, hc, sURL+"/v1/topics/T/messages", "on the new master"); code != 200 || !strings.Contains(body, "PUT_OK") {
		t.Fatalf("put on the new master: %d %s", code, body)
	}
	eventually(t, "old master follows the new one", 10*time.Second, func() error {
		st := nodeStatus(t, hc, mURL)
		if st.Master == nil || st.Master.HandshakeState != "TRANSFER" || st.Epoch != 2 {
			return fmt.Errorf("old master status %+v %+v", st, st.Master)
		}
		return nil
	})
	if rec, _, _ := ReadRoleFile(sc.DataDir); rec.Role != RoleMaster || rec.Epoch != 2 {
		t.Fatalf("new master's role file %+v", rec)
	}
	eventually(t, "old master's role file", 10*time.Second, func() error {
		if rec, _, _ := ReadRoleFile(mc.DataDir); rec.Role != RoleSlave {
			return fmt.Errorf("role file %+v", rec)
		}
		return nil
	})
	hc.CloseIdleConnections()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if err := m.stop(); err != nil {
		t.Fatal(err)
	}
}

// hookExt is an extension that counts OnMasterConnect calls.
type hookExt struct{ onConnect func() }

func (h *hookExt) Name() string { return "hook" }
func (h *hookExt) Start(env ExtensionEnv) error {
	env.OnMasterConnect(h.onConnect)
	return nil
}
func (h *hookExt) Close() error { return nil }

// TestNodeClassicSlaveRefusesExMaster: a classic slave refuses a data
// directory whose role file says master when its log holds data, with
// ErrDivergedRejoin; AllowDivergedRejoin and an empty log start.
func TestNodeClassicSlaveRefusesExMaster(t *testing.T) {
	dir := t.TempDir()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	base := Config{Listen: "127.0.0.1:0", SegmentSize: 1 << 20, Registry: pluginhost.Builtin(), ReconnectDelay: 20 * time.Millisecond}
	mdir := filepath.Join(dir, "m")
	mc := base
	mc.Role, mc.DataDir, mc.HAListen = core.AsyncMaster, mdir, "127.0.0.1:0"
	m := startNode(t, mc)
	if rec, _, _ := ReadRoleFile(mdir); rec.Role != RoleMaster || rec.Protocol != "classic" || rec.BrokerID < 1 {
		t.Fatalf("classic master role file %+v", rec)
	}
	// An empty log cannot have diverged: a slave may start on it.
	if err := m.stop(); err != nil {
		t.Fatal(err)
	}
	sc := base
	sc.Role, sc.DataDir, sc.MasterHA = core.Slave, mdir, "127.0.0.1:1"
	s := startNode(t, sc)
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}

	m = startNode(t, mc)
	if code, body := postJSON(t, hc, m.n.URL()+"/v1/topics/T/messages", "x"); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	hc.CloseIdleConnections()
	if err := m.stop(); err != nil {
		t.Fatal(err)
	}
	n, err := New(sc)
	if err != nil {
		t.Fatal(err)
	}
	err = n.Run(context.Background())
	if !errors.Is(err, ErrDivergedRejoin) || !strings.Contains(err.Error(), "cannot detect") {
		t.Fatalf("classic slave on the ex-master's log: %v", err)
	}
	sc.AllowDivergedRejoin = true
	s = startNode(t, sc)
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if rec, _, _ := ReadRoleFile(mdir); rec.Role != RoleSlave {
		t.Fatalf("role file after the override %+v", rec)
	}
}

// TestNodeRoleClassic: a classic node answers POST /v1/role with 409.
func TestNodeRoleClassic(t *testing.T) {
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	m := startNode(t, Config{Listen: "127.0.0.1:0", SegmentSize: 1 << 20, Registry: pluginhost.Builtin(), Role: core.AsyncMaster,
		DataDir: t.TempDir(), HAListen: "127.0.0.1:0"})
	if code, body := postJSON(t, hc, m.n.URL()+"/v1/role", `{"role":"slave","master":"127.0.0.1:1"}`); code != http.StatusConflict || !strings.Contains(body, "autoswitch") {
		t.Fatalf("classic role change: %d %s", code, body)
	}
	if err := m.n.ChangeRole(context.Background(), api.RoleRequest{Role: api.RoleMaster}); !errors.Is(err, api.ErrRoleUnsupported) {
		t.Fatalf("ChangeRole on a classic node: %v", err)
	}
}

// roleExt is an extension that records the role changes it is told of,
// with the replica's role at the time of each call.
type roleExt struct {
	name string
	node *atomic.Pointer[Node]
	mu   *sync.Mutex // shared by the extensions of one test
	log  *[]string
}

func (r *roleExt) Name() string { return r.name }
func (r *roleExt) Start(env ExtensionEnv) error {
	env.OnRoleChange(func(rc RoleChange) {
		r.mu.Lock()
		defer r.mu.Unlock()
		*r.log = append(*r.log, fmt.Sprintf("%s %s %s %s core=%s", r.name, rc.Role, rc.MasterHA, rc.MasterAPI, r.node.Load().replica.Role()))
	})
	return nil
}
func (r *roleExt) Close() error { return nil }

// TestNodeRoleChangeHooks: each role change runs the OnRoleChange hooks in
// registration order, after core switched and before POST /v1/role
// answers; a refused change runs none. replicator_build_info and a
// slave's 403 follow the current role and master.
func TestNodeRoleChangeHooks(t *testing.T) {
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	var np atomic.Pointer[Node]
	var mu sync.Mutex
	var calls []string
	a := &roleExt{name: "a", node: &np, mu: &mu, log: &calls}
	b := &roleExt{name: "b", node: &np, mu: &mu, log: &calls}
	lock := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), calls...) }
	m := startNode(t, Config{Listen: "127.0.0.1:0", SegmentSize: 1 << 20, Registry: pluginhost.Builtin(), Version: "test",
		Protocol: core.ProtocolAutoSwitch, ReconnectDelay: 20 * time.Millisecond, Role: core.SyncMaster,
		DataDir: t.TempDir(), HAListen: "127.0.0.1:0", BrokerID: 7, Extensions: []Extension{a, b}})
	np.Store(m.n)
	url := m.n.URL()
	metric := func() string {
		t.Helper()
		resp, err := hc.Get(url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(l, "replicator_build_info{") {
				return l
			}
		}
		t.Fatalf("no replicator_build_info in %s", body)
		return ""
	}
	if l := metric(); !strings.Contains(l, `role="SYNC_MASTER"`) || !strings.Contains(l, `version="test"`) {
		t.Fatalf("build info at start: %s", l)
	}

	code, body := postJSON(t, hc, url+"/v1/role", `{"role":"slave","master":"127.0.0.1:1","master_api":"127.0.0.1:2"}`)
	if code != 200 {
		t.Fatalf("demote: %d %s", code, body)
	}
	want := []string{"a SLAVE 127.0.0.1:1 http://127.0.0.1:2 core=slave", "b SLAVE 127.0.0.1:1 http://127.0.0.1:2 core=slave"}
	if got := lock(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("hooks after the demote:\n%q\nwant\n%q", got, want)
	}
	if code, body := postJSON(t, hc, url+"/v1/topics/T/messages", "x"); code != http.StatusForbidden || !strings.Contains(body, `"master_api":"http://127.0.0.1:2"`) {
		t.Fatalf("put on the demoted master: %d %s", code, body)
	}
	if l := metric(); !strings.Contains(l, `role="SLAVE"`) {
		t.Fatalf("build info after the demote: %s", l)
	}

	if code, body := postJSON(t, hc, url+"/v1/role", `{"role":"master"}`); code != 200 {
		t.Fatalf("promote: %d %s", code, body)
	}
	if code, body := postJSON(t, hc, url+"/v1/role", `{"role":"master"}`); code != http.StatusConflict {
		t.Fatalf("second promote: %d %s", code, body)
	}
	want = append(want, "a SYNC_MASTER   core=master", "b SYNC_MASTER   core=master")
	if got := lock(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("hooks after the promote:\n%q\nwant\n%q", got, want)
	}
	if l := metric(); !strings.Contains(l, `role="SYNC_MASTER"`) {
		t.Fatalf("build info after the promote: %s", l)
	}
	hc.CloseIdleConnections()
	if err := m.stop(); err != nil {
		t.Fatal(err)
	}
}
