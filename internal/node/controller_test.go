package node

import (
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

	"github.com/replicatorhq/replicator/controller/etcdstore"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/ctltest"
	"github.com/replicatorhq/replicator/internal/pluginhost"
)

// testLeaseTTL is the controller-mode tests' lease: long enough that a
// busy machine (the race detector, two cores, other packages' tests) does
// not miss renewals and fence a healthy master; a stopped node revokes its
// lease, so no test waits for it to expire.
const testLeaseTTL = 3 * time.Second

// controllerNode is the configuration of node id of group "g" on store.
func controllerNode(t *testing.T, store *etcdstore.Store, dir string, id int64, exts ...Extension) Config {
	return Config{Role: core.SyncMaster, PromoteRole: core.SyncMaster, Protocol: core.ProtocolAutoSwitch, BrokerID: id,
		DataDir: filepath.Join(dir, fmt.Sprint(id)), Listen: "127.0.0.1:0", HAListen: ctltest.FreeAddr(t), SegmentSize: 1 << 20,
		SlaveTimeout: 3 * time.Second, ReconnectDelay: 50 * time.Millisecond, Registry: pluginhost.Builtin(), Version: "test",
		Extensions: exts, Controller: &ControllerConfig{Store: store, Group: "g", LeaseTTL: testLeaseTTL}}
}

// TestControllerConfigChecks: controller mode refuses the classic
// protocol, a slave role, no broker id, a bad group and an HA address
// without a fixed port.
func TestControllerConfigChecks(t *testing.T) {
	good := Config{Role: core.SyncMaster, Protocol: core.ProtocolAutoSwitch, BrokerID: 1, HAListen: "127.0.0.1:7000",
		Controller: &ControllerConfig{Store: &etcdstore.Store{}, Group: "g"}}
	if err := good.checkControllerConfig(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(c *Config){
		"classic":      func(c *Config) { c.Protocol = core.ProtocolClassic },
		"slave":        func(c *Config) { c.Role = core.Slave },
		"no broker id": func(c *Config) { c.BrokerID = 0 },
		"bad group":    func(c *Config) { c.Controller = &ControllerConfig{Store: c.Controller.Store, Group: "a/b"} },
		"port 0":       func(c *Config) { c.HAListen = "127.0.0.1:0" },
		"advertise": func(c *Config) {
			c.Controller = &ControllerConfig{Store: c.Controller.Store, Group: "g", HAAdvertise: "nohost"}
		},
		"no store": func(c *Config) { c.Controller = &ControllerConfig{Group: "g"} },
	} {
		c := good
		mod(&c)
		if err := c.checkControllerConfig(); !errors.Is(err, ErrControllerConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestControllerModeInProcess: two controller-mode nodes on an embedded
// etcd. One is elected; the status of both shows the group, the master
// and the registration; the master's put answer names its epoch and
// broker id; a slave's put answers 403 with the master's API in the body
// and the Location header; POST /v1/role answers 409; the extensions'
// OnRoleChange hooks and DATA/role follow the controller's decisions; a
// stopped master revokes its lease and the other node takes over at
// once, at a higher epoch.
func TestControllerModeInProcess(t *testing.T) {
	store := ctltest.StartController(t)
	dir := t.TempDir()
	hc := &http.Client{Transport: &http.Transport{}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer hc.CloseIdleConnections()
	var mu sync.Mutex
	var hooks []string
	ext := func(name string) Extension {
		return &funcExt{name: name, onRole: func(rc RoleChange) {
			mu.Lock()
			hooks = append(hooks, fmt.Sprintf("%s %s %s", name, rc.Role, rc.MasterAPI))
			mu.Unlock()
		}}
	}
	a := startNode(t, controllerNode(t, store, dir, 1, ext("a")))
	b := startNode(t, controllerNode(t, store, dir, 2, ext("b")))
	nodes := map[int64]*started{1: a, 2: b}
	url := func(s *started) string { return "http://" + s.n.Addr() }

	var master, slave *started
	eventually(t, "a master and a slave", 10*time.Second, func() error {
		sa, sb := nodeStatus(t, hc, url(a)), nodeStatus(t, hc, url(b))
		if sa.MasterBrokerID == nil || sb.MasterBrokerID == nil || *sa.MasterBrokerID != *sb.MasterBrokerID || *sa.MasterBrokerID < 1 {
			return fmt.Errorf("masters %v %v", sa.MasterBrokerID, sb.MasterBrokerID)
		}
		master = nodes[*sa.MasterBrokerID]
		slave = nodes[3-*sa.MasterBrokerID]
		ms, ss := nodeStatus(t, hc, url(master)), nodeStatus(t, hc, url(slave))
		if ms.Role != "SYNC_MASTER" || ss.Role != "SLAVE" || len(ms.InSync) != 2 {
			return fmt.Errorf("roles %s %s, in-sync %v", ms.Role, ss.Role, ms.InSync)
		}
		return nil
	})
	eventually(t, "the slave's view of the group", 10*time.Second, func() error {
		st := nodeStatus(t, hc, url(slave))
		if st.Group != "g" || st.MasterAPI != url(master) || st.Controller == nil || !st.Controller.Registered || !st.Controller.LeaseValid ||
			st.Controller.NoMasterReason != "" || len(st.InSync) != 2 {
			return fmt.Errorf("slave status: %+v controller %+v", st, st.Controller)
		}
		return nil
	})

	// The master's put names its epoch and itself.
	put := func(s *started) (int, http.Header, string) {
		resp, err := hc.Post(url(s)+"/v1/topics/T/messages?queue=1", "application/octet-stream", strings.NewReader("m"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	firstEpoch := nodeStatus(t, hc, url(master)).Epoch
	code, _, body := put(master)
	wantBroker := fmt.Sprintf(`"epoch":%d,"broker_id":%d`, firstEpoch, master.n.brokerID)
	if code != http.StatusOK || !strings.Contains(body, `"status":"PUT_OK"`) || !strings.Contains(body, wantBroker) {
		t.Fatalf("put on the master: %d %s (want %s)", code, body, wantBroker)
	}
	code, hdr, body := put(slave)
	if code != http.StatusForbidden || !strings.Contains(body, `"master_api":"`+url(master)+`"`) || hdr.Get("Location") != url(master)+"/v1/topics/T/messages?queue=1" {
		t.Fatalf("put on the slave: %d %s, Location %q", code, body, hdr.Get("Location"))
	}
	code, body = postJSON(t, hc, url(slave)+"/v1/role", `{"role":"master"}`)
	if code != http.StatusConflict || !strings.Contains(body, "controller decides") {
		t.Fatalf("promote in controller mode: %d %s", code, body)
	}
	rec, ok, err := ReadRoleFile(master.n.cfg.DataDir)
	if err != nil || !ok || rec.Role != RoleMaster || rec.Epoch != firstEpoch {
		t.Fatalf("the master's role file: %+v %v %v", rec, ok, err)
	}

	// The master stops: its lease is revoked and the other node is
	// elected well before the TTL would have expired... and the hooks
	// saw every role change.
	stopped := time.Now()
	if err := master.stop(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the slave elected", 10*time.Second, func() error {
		st := nodeStatus(t, hc, url(slave))
		if !strings.HasSuffix(st.Role, "MASTER") || st.Epoch <= firstEpoch || st.Fenced != "" {
			return fmt.Errorf("role %s epoch %d fenced %q", st.Role, st.Epoch, st.Fenced)
		}
		return nil
	})
	if d := time.Since(stopped); d >= testLeaseTTL {
		t.Fatalf("took over after %v: waited for the lease (%v) to expire, not for its revocation", d, testLeaseTTL)
	}
	code, _, body = put(slave)
	if code != http.StatusOK || !strings.Contains(body, fmt.Sprintf(`"epoch":%d,"broker_id":%d`, nodeStatus(t, hc, url(slave)).Epoch, slave.n.brokerID)) {
		t.Fatalf("put on the new master: %d %s", code, body)
	}
	// The hooks run right after core switched (the status shows it first).
	mname, sname := map[*started]string{a: "a", b: "b"}[master], map[*started]string{a: "a", b: "b"}[slave]
	eventually(t, "the role-change hooks", 5*time.Second, func() error {
		mu.Lock()
		got := strings.Join(hooks, "; ")
		mu.Unlock()
		for _, want := range []string{mname + " SYNC_MASTER ", sname + " SLAVE " + url(master), sname + " SYNC_MASTER "} {
			if !strings.Contains(got, want) {
				return fmt.Errorf("hooks %q lack %q", got, want)
			}
		}
		return nil
	})
	if err := slave.stop(); err != nil {
		t.Fatal(err)
	}
}

// funcExt is an extension that records role changes.
type funcExt struct {
	name   string
	onRole func(RoleChange)
	starts atomic.Int32
}

func (f *funcExt) Name() string { return f.name }
func (f *funcExt) Start(env ExtensionEnv) error {
	if env.Role != core.Slave {
		return fmt.Errorf("a controller-mode node's extensions start as on a slave, not %s", env.Role)
	}
	f.starts.Add(1)
	env.OnRoleChange(f.onRole)
	return nil
}
func (f *funcExt) Close() error { return nil }
