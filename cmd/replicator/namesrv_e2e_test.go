package main

import (
	"context"
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
	"github.com/replicatorhq/replicator/remoting"
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
	at   time.Time
	code int32
	id   string
	addr string
	ha   string
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
			ns.reqs = append(ns.reqs, nsReq{at: time.Now(), code: req.Code, id: req.ExtFields["brokerId"], addr: req.ExtFields["brokerAddr"], ha: req.ExtFields["haServerAddr"]})
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
// once with 0 (RocketMQ 5's ReplicasManager sets brokerId 0 on a master);
// a graceful stop unregisters id 0.
func TestNamesrvNodeRegistersByRole(t *testing.T) {
	t.Parallel()
	ns := startGoNamesrv(t)
	dir := t.TempDir()
	rem := ports(t, 1)[0]
	ctl := proctest.StartController(t, binPath, filepath.Join(dir, "ctl"))
	t0 := time.Now()
	n := proctest.StartNode(t, binPath, filepath.Join(dir, "n3"), ctl.API, "orders", 3,
		"--remoting-listen", rem, "--namesrv-addr", ns.addr, "--register-interval", "60s", "--broker-name", "orders")
	first := ns.wait(t, t0, proctest.WaitTimeout, fmt.Sprintf("103 id=0 addr=%s ha=%s", rem, n.HA))
	// Before the election, the node registered as a slave with its own id.
	ns.mu.Lock()
	var before []string
	for _, r := range ns.reqs {
		if r.at.Before(first.at) {
			before = append(before, r.String())
		}
	}
	ns.mu.Unlock()
	if want := fmt.Sprintf("103 id=3 addr=%s ha=%s", rem, n.HA); len(before) == 0 || before[0] != want {
		t.Errorf("registrations before the election %q, want %q first", before, want)
	}
	if first.at.Sub(t0) > 30*time.Second {
		t.Errorf("registered as master %v after the start: not at the role change", first.at.Sub(t0))
	}
	t1 := time.Now()
	n.Stop()
	ns.wait(t, t1, 10*time.Second, fmt.Sprintf("104 id=0 addr=%s ha=", rem))
}
