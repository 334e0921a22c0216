package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/replicatorhq/replicator/controller"
	"github.com/replicatorhq/replicator/controller/etcdstore"
	"github.com/replicatorhq/replicator/internal/node/testpki"
)

// startController runs `replicator controller` as a process and waits
// until its etcd answers a read.
func startController(t *testing.T, name string, args ...string) (*proc, string) {
	t.Helper()
	var listen string
	for i, a := range args {
		if a == "--listen" {
			listen = args[i+1]
		}
	}
	p := start(t, name, append([]string{"--log-level", "debug", "controller"}, args...)...)
	url := "http://" + listen
	waitEtcd(t, p, url)
	return p, url
}

func etcdClient(t *testing.T, urls ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: urls, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// waitEtcd polls url until etcd answers. Its client is closed on return:
// an open client (a stream) makes the member's graceful stop wait for its
// request timeout.
func waitEtcd(t *testing.T, p *proc, url string) {
	t.Helper()
	waitEtcdConfig(t, p, clientv3.Config{Endpoints: []string{url}})
}

func waitEtcdConfig(t *testing.T, p *proc, cfg clientv3.Config) {
	t.Helper()
	cfg.DialTimeout, cfg.Logger = 5*time.Second, zap.NewNop()
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	eventually(t, p.name+" serving", func() error {
		select {
		case <-p.done:
			t.Fatalf("%s exited early: %v", p.name, p.err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := cli.Get(ctx, "/probe")
		return err
	})
}

func showGroup(t *testing.T, url, group string) groupView {
	t.Helper()
	code, out, errOut := runCLI(t, "", "controller", "show-group", "--controller", url, "--group", group)
	if code != 0 {
		t.Fatalf("show-group: exit %d: %s", code, errOut)
	}
	var v groupView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("show-group output %q: %v", out, err)
	}
	return v
}

func TestControllerProcess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ctl")
	listen := ports(t, 1)[0]
	p, url := startController(t, "controller", "--data", dir, "--listen", listen, "--election-delay", "100ms")

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// Each node on a client of its own: closing it is the node dying.
	register := func(id int64) (*clientv3.Client, *etcdstore.Registration, controller.Decision) {
		cli := etcdClient(t, url)
		store, err := etcdstore.New(etcdstore.Config{Client: cli})
		if err != nil {
			t.Fatal(err)
		}
		reg, d, err := store.Register(ctx, "orders", controller.Node{BrokerID: id, HAAddr: fmt.Sprintf("127.0.0.1:%d", 10900+id)}, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return cli, reg, d
	}
	c1, _, d := register(1)
	if d.Outcome != controller.Elected || d.Master != 1 || d.MasterEpoch != 1 {
		t.Fatalf("registration: %+v", d)
	}
	c2, r2, _ := register(2)
	store2, err := etcdstore.New(etcdstore.Config{Client: c2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store2.Confirmer("orders", 1).Propose(ctx, 1, []int64{1, 2}); err != nil {
		t.Fatal(err)
	}
	v := showGroup(t, url, "orders")
	if v.State.Master != 1 || len(v.Nodes) != 2 || !v.Nodes[0].Alive || v.Nodes[1].HAAddr != "127.0.0.1:10902" || v.State.SyncStateSetEpoch != 2 {
		t.Fatalf("show-group: %+v", v)
	}

	// The master dies: the controller process elects broker 2 once the
	// lease expires.
	c1.Close()
	wcli := etcdClient(t, url)
	watcher, err := etcdstore.New(etcdstore.Config{Client: wcli})
	if err != nil {
		t.Fatal(err)
	}
	group := func() controller.Group {
		snap, err := watcher.Load(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		return snap.State.Group
	}
	eventually(t, "election by the controller", func() error {
		if g := group(); g.Master != 2 || g.MasterEpoch != 2 {
			return fmt.Errorf("group %+v", g)
		}
		return nil
	})
	// The new master leaves too: no member left, the group says so.
	if err := r2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c2.Close()
	eventually(t, "group without a master", func() error {
		if g := group(); g.Master != controller.NoMaster || g.NoMasterReason == "" {
			return fmt.Errorf("group %+v", g)
		}
		return nil
	})
	wcli.Close() // before the stop: etcd's graceful stop waits for open clients
	// The supervisor's decisions are counted on etcd's /metrics: just
	// after it wrote the state the test saw, so the count may lag.
	eventually(t, "the decisions counted", func() error {
		code, body := httpDo(t, "GET", url+"/metrics", nil, nil)
		for _, want := range []string{`replicator_controller_decisions_total{outcome="elected"} 1`, `replicator_controller_decisions_total{outcome="no_master"} 1`} {
			if code != 200 || !strings.Contains(string(body), want+"\n") {
				return fmt.Errorf("metrics (status %d) lack %s", code, want)
			}
		}
		return nil
	})

	// SIGTERM: a clean exit; a restart on the same directory keeps the state.
	p.stop()
	log, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "[ERROR] replicator.controller: group has no master"); n != 1 {
		t.Fatalf("%d ERROR lines for the group without a master, want 1", n)
	}
	if !strings.Contains(string(log), "elected a master: group=orders master=2 epoch=2") {
		t.Fatalf("no election logged:\n%s", log)
	}
	p.restart2(t, url)
	if v := showGroup(t, url, "orders"); v.State.MasterEpoch != 2 || v.State.NoMasterReason == "" || v.Revision == 0 {
		t.Fatalf("after restart: %+v", v)
	}

	code, out, errOut := runCLI(t, "", "controller", "delete-group", "--controller", url, "--group", "orders")
	if code != 0 || !strings.Contains(out, "deleted group orders: 1 keys") {
		t.Fatalf("delete-group: exit %d, %q, %q", code, out, errOut)
	}
	if v := showGroup(t, url, "orders"); v.Revision != 0 || v.State.Master != controller.NoMaster {
		t.Fatalf("after delete: %+v", v)
	}
	p.stop()
}

// restart2 starts p again and waits for its etcd.
func (p *proc) restart2(t *testing.T, url string) {
	t.Helper()
	p.launch()
	waitEtcd(t, p, url)
}

func TestControllerThreeMembers(t *testing.T) {
	if testing.Short() {
		t.Skip("three controller processes: skipped in -short")
	}
	pp := ports(t, 6)
	names := []string{"c1", "c2", "c3"}
	var peers []string
	for i, n := range names {
		peers = append(peers, fmt.Sprintf("%s=http://%s", n, pp[3+i]))
	}
	cluster := strings.Join(peers, ",")
	var procs []*proc
	for i, n := range names {
		// The members serve once a quorum runs: start them all, then wait.
		procs = append(procs, start(t, n, "--log-level", "debug", "controller", "--data", filepath.Join(t.TempDir(), n),
			"--listen", pp[i], "--name", n, "--peers", cluster))
	}
	for i, p := range procs {
		waitEtcd(t, p, "http://"+pp[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := etcdClient(t, "http://"+pp[0]).Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	ml, err := etcdClient(t, "http://"+pp[2]).MemberList(ctx)
	if err != nil || len(ml.Members) != 3 {
		t.Fatalf("members: %v %v", ml, err)
	}
	// One member stops: the other two still hold a quorum.
	procs[0].stop()
	resp, err := etcdClient(t, "http://"+pp[1]).Get(ctx, "/k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("read with two members: %v %v", resp, err)
	}
	procs[1].stop()
	procs[2].stop()
}

func TestControllerBadUsage(t *testing.T) {
	for _, args := range [][]string{
		{"controller", "frob"},
		{"controller", "delete-group"},
		{"controller", "delete-group", "--group", "a/b"},
		{"controller", "show-group", "--group", "g", "--controller", "::bad url"},
		{"controller", "delete-group", "show-group"},
		{"controller", "show-group", "--group", "g", "--controller-cert", "/nonexistent"},
		{"controller", "show-group", "--group", "g", "--controller-password-file", "/etc/hostname"},
		{"controller", "show-group", "--group", "g", "--controller-user", "u:p", "--controller-password-file", "/etc/hostname"},
	} {
		if code, _, errOut := runCLI(t, "", args...); code != exitUsage {
			t.Errorf("%v: exit %d (%s), want %d", args, code, errOut, exitUsage)
		}
	}
	// An unreachable controller is an error, not a usage error.
	port := ports(t, 1)[0]
	if code, _, errOut := runCLI(t, "", "controller", "delete-group", "--group", "g", "--controller", port, "--controller-timeout", "500ms"); code != exitError {
		t.Errorf("unreachable controller: exit %d (%s)", code, errOut)
	}
}

func TestControllerTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "controller-ca")
	caFile := ca.WriteCA(t, dir, "ca.pem")
	srvCert, srvKey := ca.Server(t, "controller").Write(t, dir, "server")
	cliCert, cliKey := ca.Client(t, "admin").Write(t, dir, "client")
	listen := ports(t, 1)[0]
	url := "https://" + listen
	p := start(t, "controller", "--log-level", "debug", "controller", "--data", filepath.Join(dir, "ctl"), "--listen", listen,
		"--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-ca", caFile,
		"--controller-cacert", caFile, "--controller-cert", cliCert, "--controller-key", cliKey)
	tlsCfg, err := (transport.TLSInfo{CertFile: cliCert, KeyFile: cliKey, TrustedCAFile: caFile}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	waitEtcdConfig(t, p, clientv3.Config{Endpoints: []string{url}, TLS: tlsCfg})

	tlsArgs := []string{"--controller", url, "--controller-cacert", caFile, "--controller-cert", cliCert, "--controller-key", cliKey}
	code, out, errOut := runCLI(t, "", append([]string{"controller", "show-group", "--group", "g"}, tlsArgs...)...)
	if code != 0 || !strings.Contains(out, `"group": "g"`) {
		t.Fatalf("show-group over TLS: exit %d: %s %s", code, out, errOut)
	}
	// Without a client certificate the controller refuses the connection.
	if code, _, errOut := runCLI(t, "", "controller", "show-group", "--group", "g", "--controller", url,
		"--controller-cacert", caFile, "--controller-timeout", "2s"); code != exitError {
		t.Fatalf("show-group without a client certificate: exit %d: %s", code, errOut)
	}
	// The supervisor reached its member over TLS.
	log, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "supervising groups") || strings.Contains(string(log), "supervise: checking masters") {
		t.Fatalf("supervisor over TLS:\n%s", log)
	}
	p.stop()
}

func TestControllerAuth(t *testing.T) {
	dir := t.TempDir()
	listen := ports(t, 1)[0]
	p, url := startController(t, "controller", "--data", filepath.Join(dir, "ctl"), "--listen", listen, "--supervise=false")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "root", "s3cret"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	cli.Close()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI(t, "", "controller", "show-group", "--group", "g", "--controller", url); code != exitError {
		t.Fatalf("show-group without a user: exit %d: %s", code, errOut)
	}
	if code, out, errOut := runCLI(t, "", "controller", "show-group", "--group", "g", "--controller", url,
		"--controller-user", "root", "--controller-password-file", pw); code != 0 || !strings.Contains(out, `"group": "g"`) {
		t.Fatalf("show-group as root: exit %d: %s %s", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, "", "controller", "show-group", "--group", "g", "--controller", url,
		"--controller-user", "root:wrong"); code != exitError {
		t.Fatalf("show-group with a wrong password: exit %d: %s", code, errOut)
	}
	p.stop()
}
