package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/controller"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/api"
)

// nodeCmd parses args (after "node") with environ and builds the node
// configuration.
func nodeCmd(t *testing.T, environ []string, args ...string) (*options, error) {
	t.Helper()
	var o options
	res, err := program(&o).Parse(append([]string{"--log-level", "off", "node"}, args...), environ)
	if err != nil {
		return &o, err
	}
	e := &env{opts: &o, sources: res.Sources, log: newLogger(o.global, os.Stderr), environ: environ}
	cfg, err := nodeCmdConfig(e, &o.node)
	if err == nil {
		if cfg.Protocol != core.ProtocolAutoSwitch || cfg.Controller == nil {
			t.Fatalf("node config: protocol %v, controller %+v", cfg.Protocol, cfg.Controller)
		}
	}
	return &o, err
}

// TestNodeCommandOptions: the node command's flags, config file and
// environment, its defaults, and the combinations it refuses (exit 2).
func TestNodeCommandOptions(t *testing.T) {
	dir := t.TempDir()
	base := []string{"--group", "orders", "--broker-id", "2", "--data", filepath.Join(dir, "d")}
	o, err := nodeCmd(t, nil, append(base, "--controller", "http://10.0.0.1:2379,http://10.0.0.2:2379", "--replication", "sync", "--lease-ttl", "2s")...)
	if err != nil {
		t.Fatal(err)
	}
	n := &o.node
	if n.Group != "orders" || n.n.as.BrokerID != 2 || n.LeaseTTL != 2*time.Second || len(n.Client.Endpoints) != 2 || n.n.HAListen != defaultHAListen ||
		n.n.SyncAcks != 0 || n.Prefix == "" {
		t.Fatalf("node options %+v", n)
	}
	// Defaults: a 3 s lease, the local controller.
	if o, err = nodeCmd(t, nil, base...); err != nil || o.node.LeaseTTL != 3*time.Second || o.node.Client.Endpoints[0] != "http://"+defaultControllerListen {
		t.Fatalf("defaults: %+v %v", o.node, err)
	}
	// Environment and config file, as for every other command.
	cfgFile := filepath.Join(dir, "node.hcl")
	if err := os.WriteFile(cfgFile, []byte("node {\n  group = \"payments\"\n  lease_ttl = \"5s\"\n  ha_advertise = \"10.1.1.1:10912\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var po options
	res, err := program(&po).Parse([]string{"--config", cfgFile, "node", "--data", dir}, []string{"REPLICATOR_NODE_BROKER_ID=9"})
	if err != nil {
		t.Fatal(err)
	}
	if po.node.Group != "payments" || po.node.LeaseTTL != 5*time.Second || po.node.n.as.BrokerID != 9 || po.node.HAAdvertise != "10.1.1.1:10912" {
		t.Fatalf("config file and environment: %+v (sources %v)", po.node, res.Sources)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--broker-id", "1"}, "--group"},
		{[]string{"--group", "g"}, "--broker-id"},
		{append(base[:4:4], "--broker-id", "0"), "--broker-id"},
		{[]string{"--group", "a/b", "--broker-id", "1"}, "--group"},
		{append(base, "--lease-ttl", "100ms"), "--lease-ttl"},
		{append(base, "--ha-listen", "0.0.0.0:7000"), "--ha-advertise"},
		{append(base, "--listen", "0.0.0.0:7001"), "--api-advertise"},
		{append(base, "--listen", "127.0.0.1:7002", "--ha-listen", "127.0.0.1:7002"), "the same address"},
		{append(base, "--ha-listen", "127.0.0.1:0"), "fixed port"},
		{append(base, "--ha-tls-server-name", "x"), "--ha-tls-ca"},
		{append(base, "--segment-size", "1MiB", "--max-message-size", "1MiB"), "--max-message-size"},
		{append(base, "--controller-cert", filepath.Join(dir, "absent")), "does not exist"},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"--log-level", "off", "node"}, tc.args...), nil, strings.NewReader(""), &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and %q", tc.args, code, errb.String(), exitUsage, tc.want)
		}
	}
}

// TestPutAPIList: put's --api takes several comma-separated URLs, each
// checked.
func TestPutAPIList(t *testing.T) {
	var o options
	if _, err := program(&o).Parse([]string{"put", "--api", "127.0.0.1:1, http://127.0.0.1:2/", "m"}, nil); err != nil {
		t.Fatal(err)
	}
	if o.put.API != "http://127.0.0.1:1,http://127.0.0.1:2" {
		t.Fatalf("--api %q", o.put.API)
	}
	for _, bad := range []string{",", "http://127.0.0.1:1,ftp://x:2"} {
		if _, err := program(&options{}).Parse([]string{"put", "--api", bad, "m"}, nil); err == nil {
			t.Errorf("--api %q accepted", bad)
		}
	}
}

// TestPrintControllerStatus: the text status of a controller-mode node
// shows the group, its master, the in-sync set and the lease.
func TestPrintControllerStatus(t *testing.T) {
	two, none := int64(2), controller.NoMaster
	for _, tc := range []struct {
		st   api.Status
		want []string
	}{
		{api.Status{Role: "SLAVE", BrokerID: 1, Group: "g", MasterBrokerID: &two, MasterAPI: "http://m:1", InSync: []int64{1, 2},
			Controller: &api.ControllerStatus{Registered: true, LeaseValid: true, InSyncEpoch: 4}},
			[]string{"group              g", "group master       2 (http://m:1)", "[1 2] (set epoch 4)", "controller lease   valid"}},
		{api.Status{Role: "SYNC_MASTER", BrokerID: 2, Group: "g", MasterBrokerID: &two, Controller: &api.ControllerStatus{Registered: true}},
			[]string{"2 (this node)", "EXPIRED"}},
		{api.Status{Role: "NONE", Group: "g", MasterBrokerID: &none, Controller: &api.ControllerStatus{NoMasterReason: "no eligible node"}},
			[]string{"NONE (no eligible node)", "NOT REGISTERED"}},
	} {
		var b bytes.Buffer
		printControllerStatus(&b, tc.st)
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("status text lacks %q:\n%s", w, b.String())
			}
		}
	}
	var b bytes.Buffer
	printControllerStatus(&b, api.Status{Role: "SLAVE"})
	if b.Len() != 0 {
		t.Fatalf("outside controller mode: %q", b.String())
	}
}
