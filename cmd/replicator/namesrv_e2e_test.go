package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/internal/proctest"
	"github.com/replicatorhq/replicator/plugins/metadata"
	"github.com/replicatorhq/replicator/remoting"
	"github.com/replicatorhq/replicator/sdk/meta"
)

// goNamesrv is a name server for the daemon tests, on real TCP: it
// records the REGISTER_BROKER and UNREGISTER_BROKER requests it gets and
// answers SUCCESS (no master address: the Java peer in interop checks
// RouteInfoManager's rules).
type goNamesrv struct {
	addr string
	mu   sync.Mutex
	reqs []nsReq
}

type nsReq struct {
	at     time.Time
	code   int32
	id     string
	addr   string
	ha     string
	topics int // topics in the registered topic table (REGISTER_BROKER)
}

func (r nsReq) String() string {
	return fmt.Sprintf("%d id=%s addr=%s ha=%s", r.code, r.id, r.addr, r.ha)
}

func startGoNamesrv(t *testing.T) *goNamesrv {
	t.Helper()
	ns := &goNamesrv{}
	srv, err := remoting.NewServer(remoting.ServerConfig{
		Handler: remoting.HandlerFunc(func(_ context.Context, req *remoting.Command) *remoting.Command {
			ns.mu.Lock()
			ns.reqs = append(ns.reqs, nsReq{at: time.Now(), code: req.Code, id: req.ExtFields["brokerId"], addr: req.ExtFields["brokerAddr"], ha: req.ExtFields["haServerAddr"],
				topics: registeredTopics(req.Body)})
			ns.mu.Unlock()
			return remoting.NewResponse(req, remoting.Success, "")
		}),
		Logger:     hclog.NewNullLogger(),
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ns.addr = ln.Addr().String()
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return ns
}

// registeredTopics counts the topics of a REGISTER_BROKER body (-1 for
// any other body).
func registeredTopics(body []byte) int {
	var b struct {
		Wrapper *struct {
			Table map[string]json.RawMessage `json:"topicConfigTable"`
		} `json:"topicConfigSerializeWrapper"`
	}
	if json.Unmarshal(body, &b) != nil || b.Wrapper == nil {
		return -1
	}
	return len(b.Wrapper.Table)
}

// wait waits until a request matching want (its String) arrived after
// since, and returns it.
func (ns *goNamesrv) wait(t *testing.T, since time.Time, within time.Duration, want string) nsReq {
	t.Helper()
	var got nsReq
	proctest.Eventually(t, "name server request "+want, within, func() error {
		ns.mu.Lock()
		defer ns.mu.Unlock()
		for _, r := range ns.reqs {
			if !r.at.Before(since) && r.String() == want {
				got = r
				return nil
			}
		}
		return errors.New("not yet")
	})
	return got
}

// TestNamesrvRegistrationFollowsRole: two autoswitch nodes with
// --namesrv-addr register their remoting addresses (master id 0, slave its
// --broker-id) at start; after a demote and a promote each registers at
// once (well within --register-interval) with its new id, as RocketMQ 5
// does; a graceful stop sends UNREGISTER_BROKER.
func TestNamesrvRegistrationFollowsRole(t *testing.T) {
	t.Parallel()
	ns := startGoNamesrv(t)
	dir := t.TempDir()
	rem := ports(t, 2)
	t0 := time.Now()
	m := proctest.StartAutoSwitch(t, binPath, "master", filepath.Join(dir, "m"), "", "", "--broker-id", "5",
		"--remoting-listen", rem[0], "--namesrv-addr", ns.addr, "--register-interval", "60s")
	s := proctest.StartAutoSwitch(t, binPath, "slave", filepath.Join(dir, "s"), m.HA, m.API, "--broker-id", "7",
		"--remoting-listen", rem[1], "--namesrv-addr", ns.addr, "--register-interval", "60s")
	ns.wait(t, t0, proctest.WaitTimeout, fmt.Sprintf("103 id=0 addr=%s ha=%s", rem[0], m.HA))
	ns.wait(t, t0, proctest.WaitTimeout, fmt.Sprintf("103 id=7 addr=%s ha=%s", rem[1], s.HA))

	t1 := time.Now()
	if code, out, errb := runCLI(t, "", "demote", "--api", m.API, "--master", s.HA, "--master-api", s.API); code != 0 {
		t.Fatalf("demote: %d %s%s", code, out, errb)
	}
	if code, out, errb := runCLI(t, "", "promote", "--api", s.API); code != 0 {
		t.Fatalf("promote: %d %s%s", code, out, errb)
	}
	// At once: the next periodic round is 60 s away.
	ns.wait(t, t1, 10*time.Second, fmt.Sprintf("103 id=5 addr=%s ha=%s", rem[0], m.HA))
	ns.wait(t, t1, 10*time.Second, fmt.Sprintf("103 id=0 addr=%s ha=%s", rem[1], s.HA))

	t2 := time.Now()
	s.Stop()
	ns.wait(t, t2, 10*time.Second, fmt.Sprintf("104 id=0 addr=%s ha=", rem[1]))
	if log := s.ReadLog(); !strings.Contains(log, "unregistered from the name server") {
		t.Errorf("no unregistration logged:\n%s", log)
	}
}

// TestNamesrvUnreachable: a master whose name server is down starts and
// serves anyway, logging a WARN with the name server and the error, and
// counting the failure.
func TestNamesrvUnreachable(t *testing.T) {
	t.Parallel()
	dead := ports(t, 2) // nothing listens on dead[0]
	m := startMaster(t, t.TempDir(), "--remoting-listen", dead[1], "--namesrv-addr", dead[0])
	eventually(t, "the failure counted", func() error {
		code, b := httpDo(t, "GET", m.api+"/metrics", nil, nil)
		if code != 200 || !strings.Contains(string(b), `replicator_remoting_namesrv_registrations_total{outcome="error"} 1`) {
			return fmt.Errorf("%d: no failed registration in the metrics", code)
		}
		return nil
	})
	b, err := os.ReadFile(m.log)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	if !strings.Contains(log, "name server register failed") || !strings.Contains(log, "namesrv="+dead[0]) {
		t.Errorf("no WARN naming the name server:\n%s", log)
	}
	m.signal(syscall.SIGTERM)
	m.wait()
}

// TestNamesrvUsage: option combinations that cannot register exit 2 with
// a message naming the option.
func TestNamesrvUsage(t *testing.T) {
	t.Parallel()
	pp := ports(t, 3)
	base := func(role string) []string {
		return []string{role, "--data", t.TempDir(), "--listen", pp[0], "--ha-listen", pp[1]}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append(base("master"), "--remoting-listen", "off", "--namesrv-addr", "127.0.0.1:9876"), "--remoting-listen"},
		{append(base("master"), "--remoting-listen", "0.0.0.0:"+strings.Split(pp[2], ":")[1], "--namesrv-addr", "127.0.0.1:9876"), "--remoting-advertise"},
		{append(base("master"), "--namesrv-addr", "127.0.0.1:9876", "--register-interval", "5s"), "--register-interval"},
		{append(base("master"), "--namesrv-addr", "127.0.0.1:9876;nohost"), "--namesrv-addr"},
		{[]string{"slave", "--data", t.TempDir(), "--listen", pp[0], "--master", pp[1], "--namesrv-addr", "127.0.0.1:9876"}, "--ha-protocol autoswitch"},
		{[]string{"slave", "--ha-protocol", "autoswitch", "--data", t.TempDir(), "--listen", pp[0], "--master", pp[1], "--remoting-listen", pp[2], "--namesrv-addr", "127.0.0.1:9876"}, "--broker-id"},
	} {
		code, _, errb := runCLI(t, "", c.args...)
		if code != exitUsage || !strings.Contains(errb, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d mentioning %s", c.args, code, errb, exitUsage, c.want)
		}
	}
}

// TestNamesrvNodeRegistersByRole: a `replicator node` with --namesrv-addr
// registers with its --broker-id until the controller elects it, then at
// once with 0 (RocketMQ 5's ReplicasManager sets brokerId 0 on a master),
// its --ha-advertise address as haServerAddr; a graceful stop unregisters
// id 0.
func TestNamesrvNodeRegistersByRole(t *testing.T) {
	t.Parallel()
	ns := startGoNamesrv(t)
	dir := t.TempDir()
	rem := ports(t, 1)[0]
	ctl := proctest.StartController(t, binPath, filepath.Join(dir, "ctl"))
	t0 := time.Now()
	// --ha-advertise (an address behind NAT) is the haServerAddr
	// registered, not --ha-listen.
	const haAdvertised = "replicator-ha.test:10912"
	n := proctest.StartNode(t, binPath, filepath.Join(dir, "n3"), ctl.API, "orders", 3,
		"--remoting-listen", rem, "--namesrv-addr", ns.addr, "--register-interval", "60s", "--broker-name", "orders",
		"--ha-advertise", haAdvertised)
	first := ns.wait(t, t0, proctest.WaitTimeout, fmt.Sprintf("103 id=0 addr=%s ha=%s", rem, haAdvertised))
	// Before the election, the node registered as a slave with its own id.
	ns.mu.Lock()
	var before []string
	for _, r := range ns.reqs {
		if r.at.Before(first.at) {
			before = append(before, r.String())
		}
	}
	ns.mu.Unlock()
	if want := fmt.Sprintf("103 id=3 addr=%s ha=%s", rem, haAdvertised); len(before) == 0 || before[0] != want {
		t.Errorf("registrations before the election %q, want %q first", before, want)
	}
	if first.at.Sub(t0) > 30*time.Second {
		t.Errorf("registered as master %v after the start: not at the role change", first.at.Sub(t0))
	}
	t1 := time.Now()
	n.Stop()
	ns.wait(t, t1, 10*time.Second, fmt.Sprintf("104 id=0 addr=%s ha=", rem))
}

// writeTopics stores a topic config with the given topics in a data
// directory before the node first starts, as the metadata store keeps it.
func writeTopics(t *testing.T, dataDir string, topics ...string) {
	t.Helper()
	table := map[string]any{}
	for _, name := range topics {
		table[name] = map[string]any{"topicName": name, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}
	}
	body, err := json.Marshal(map[string]any{"topicConfigTable": table})
	if err != nil {
		t.Fatal(err)
	}
	dir := metadata.ConfigDir(dataDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	doc := metadata.EncodeDocument(meta.DataVersion{Timestamp: 1, Counter: 1}, body)
	if err := os.WriteFile(filepath.Join(dir, metadata.TopicsName), doc, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestNamesrvRegisterTopicsOption: a master registers its topics by
// default, as a RocketMQ broker does; with --namesrv-register-topics=false
// it registers the same addresses with an empty topic table, so that name
// servers route no RocketMQ client to its metadata-only port.
func TestNamesrvRegisterTopicsOption(t *testing.T) {
	t.Parallel()
	ns := startGoNamesrv(t)
	rem := ports(t, 2)
	t0 := time.Now()
	for i, c := range []struct {
		flag   string
		topics int
	}{{"true", 2}, {"false", 0}} {
		dir := t.TempDir()
		writeTopics(t, dir, "Orders", "Payments")
		m := startMaster(t, dir, "--remoting-listen", rem[i], "--namesrv-addr", ns.addr, "--register-interval", "60s",
			"--namesrv-register-topics="+c.flag)
		r := ns.wait(t, t0, proctest.WaitTimeout, fmt.Sprintf("103 id=0 addr=%s ha=%s", rem[i], m.ha))
		if r.topics != c.topics {
			t.Errorf("--namesrv-register-topics=%s: %d topics registered, want %d", c.flag, r.topics, c.topics)
		}
		m.stop()
	}
}

// TestNamesrvBusyDefaultNotRegistered: a master whose default remoting
// address is held by another process serves no remoting, so it registers
// nothing (the broker address would send RocketMQ slaves to that other
// process) and says so in one WARN line; it starts and serves its API.
func TestNamesrvBusyDefaultNotRegistered(t *testing.T) {
	t.Parallel()
	ns := startGoNamesrv(t)
	// Hold the default address; another test's master may hold it for a
	// moment, so take it as soon as it is free.
	var held net.Listener
	proctest.Eventually(t, "holding "+defaultRemotingListen, proctest.WaitTimeout, func() error {
		ln, err := net.Listen("tcp", defaultRemotingListen)
		held = ln
		return err
	})
	defer held.Close()
	m := startMaster(t, t.TempDir(), "--namesrv-addr", ns.addr, "--register-interval", "10s")
	eventually(t, "the WARN line", func() error {
		b, err := os.ReadFile(m.log)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), "not registering with the name servers") {
			return errors.New("not logged yet")
		}
		return nil
	})
	// The decision is taken once at start, before the line: no request
	// came, and none can.
	ns.mu.Lock()
	got := len(ns.reqs)
	ns.mu.Unlock()
	if got != 0 {
		t.Fatalf("%d name-server requests from a master that serves no remoting", got)
	}
	if code, _ := httpDo(t, "GET", m.api+"/v1/status", nil, nil); code != 200 {
		t.Fatalf("status: %d", code)
	}
	m.stop()
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if len(ns.reqs) != 0 {
		t.Fatalf("requests after the stop: %v", ns.reqs)
	}
}
