package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// kvBin is the kvstore binary built by TestMain.
var kvBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kvstore-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kvBin = filepath.Join(dir, "kvstore")
	args := []string{"build", "-o", kvBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building kvstore:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// handedOut holds the addresses freeAddr returned: once its probe listener
// closes, the kernel may give the same port to the next probe, and two
// processes of one test would then be told to listen on one address.
var handedOut sync.Map

func freeAddr(t *testing.T) string {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		if _, dup := handedOut.LoadOrStore(addr, true); !dup {
			return addr
		}
	}
	t.Fatal("no new free loopback port in 100 tries")
	return ""
}

// proc is a kvstore leader or follower process.
type proc struct {
	t    *testing.T
	name string
	args []string
	http string
	cmd  *exec.Cmd
	logs *bytes.Buffer
	done chan error
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, args: args}
	for i, a := range args {
		if a == "--http" {
			p.http = args[i+1]
		}
	}
	p.restart()
	t.Cleanup(func() {
		if p.cmd != nil {
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", p.name, p.logs)
		}
	})
	return p
}

func (p *proc) restart() {
	p.t.Helper()
	if p.logs == nil {
		p.logs = &bytes.Buffer{}
	}
	p.cmd = exec.Command(kvBin, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.done = make(chan error, 1)
	go func(c *exec.Cmd, done chan error) { done <- c.Wait() }(p.cmd, p.done)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + p.http + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-p.done:
			p.cmd = nil
			p.t.Fatalf("%s exited while starting: %v\n%s", p.name, err, p.logs)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s did not serve on %s within 20s\n%s", p.name, p.http, p.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends sig and waits; SIGTERM must give exit status 0.
func (p *proc) stop(sig syscall.Signal) {
	p.t.Helper()
	p.cmd.Process.Signal(sig)
	select {
	case err := <-p.done:
		if sig == syscall.SIGTERM && err != nil {
			p.t.Fatalf("%s: exit after SIGTERM: %v\n%s", p.name, err, p.logs)
		}
	case <-time.After(20 * time.Second):
		p.t.Fatalf("%s did not exit after %v", p.name, sig)
	}
	p.cmd = nil
}

// cli runs a client command and returns its exit code and standard output.
func cli(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(kvBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String() + errb.String()
}

// httpDo sends one request to a node and returns the status code and body.
func httpDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
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

// put writes over HTTP (the CLI is tested separately: a process per write
// would make this test slow).
func put(t *testing.T, addr, key, value string) {
	t.Helper()
	code, out := httpDo(t, http.MethodPut, "http://"+addr+"/v1/keys/"+key, value)
	if code != http.StatusOK || !strings.Contains(out, `"status":"PUT_OK"`) {
		t.Fatalf("put %s: HTTP %d: %s", key, code, out)
	}
}

func wantValue(t *testing.T, addr, key, want string) {
	t.Helper()
	code, out := httpDo(t, http.MethodGet, "http://"+addr+"/v1/keys/"+key, "")
	if want == "" {
		if code != http.StatusNotFound {
			t.Errorf("get %s on %s: HTTP %d %q, want 404", key, addr, code, out)
		}
		return
	}
	if code != http.StatusOK || out != want {
		t.Errorf("get %s on %s: HTTP %d %.40q, want %.40q", key, addr, code, out, want)
	}
}

func status(t *testing.T, addr string) statusResult {
	t.Helper()
	code, out := httpDo(t, http.MethodGet, "http://"+addr+"/v1/status", "")
	var s statusResult
	if code != http.StatusOK || json.Unmarshal([]byte(out), &s) != nil {
		t.Fatalf("status %s: HTTP %d %q", addr, code, out)
	}
	return s
}

// TestLeaderFollowerProcesses runs a leader and a follower as processes:
// sync writes read back from the follower, a follower restart, a leader
// crash (SIGKILL) and restart, async writes, and a new empty follower that
// rebuilds the whole state from the leader's log.
func TestLeaderFollowerProcesses(t *testing.T) {
	dir := t.TempDir()
	leaderHTTP, leaderHA, followerHTTP := freeAddr(t), freeAddr(t), freeAddr(t)
	seg := "--segment-size=65536" // small: the log spans several segments
	leaderArgs := []string{"leader", "--data", filepath.Join(dir, "leader"), "--http", leaderHTTP, "--ha", leaderHA, seg}
	leader := start(t, "leader", leaderArgs...)
	follower := start(t, "follower", "follower", "--data", filepath.Join(dir, "follower"), "--http", followerHTTP,
		"--leader", leaderHA, "--reconnect-delay", "100ms", seg)

	// Sync writes: PUT_OK means the follower holds the write, and a read on
	// the follower applies everything its log holds first.
	want := map[string]string{}
	big := strings.Repeat("v", 5000)
	for i := range 30 {
		k, v := fmt.Sprintf("key-%02d", i), fmt.Sprintf("%s-%d", big, i)
		put(t, leaderHTTP, k, v)
		want[k] = v
	}
	put(t, leaderHTTP, "color", "blue")
	put(t, leaderHTTP, "color", "green")
	if code, out := httpDo(t, http.MethodDelete, "http://"+leaderHTTP+"/v1/keys/key-07", ""); code != http.StatusOK {
		t.Fatalf("delete: %d %s", code, out)
	}
	want["color"] = "green"
	delete(want, "key-07")
	check := func(addr string) {
		t.Helper()
		for k, v := range want {
			wantValue(t, addr, k, v)
		}
		wantValue(t, addr, "key-07", "")
		if s := status(t, addr); s.Keys != len(want) {
			t.Errorf("%s: %d keys, want %d", addr, s.Keys, len(want))
		}
	}
	check(followerHTTP)
	check(leaderHTTP)
	if code, out := httpDo(t, http.MethodPut, "http://"+followerHTTP+"/v1/keys/x", "y"); code != http.StatusForbidden {
		t.Errorf("put on the follower: HTTP %d %q, want 403", code, out)
	}
	if s := status(t, leaderHTTP); s.MaxOffset < 2*65536 {
		t.Fatalf("leader log %d bytes, want several segments", s.MaxOffset)
	}

	// Follower restart: state rebuilt from its own log, then it resumes.
	follower.stop(syscall.SIGTERM)
	follower.restart()
	check(followerHTTP)
	put(t, leaderHTTP, "after-follower-restart", "1")
	want["after-follower-restart"] = "1"
	check(followerHTTP)

	// Leader crash: SIGKILL, restart, state rebuilt from its log; the
	// follower reconnects by itself.
	leader.stop(syscall.SIGKILL)
	leader.restart()
	check(leaderHTTP)
	put(t, leaderHTTP, "after-leader-crash", "2")
	want["after-leader-crash"] = "2"
	check(followerHTTP)

	// Async writes return once the leader holds them; the follower gets
	// them shortly after.
	leader.stop(syscall.SIGTERM)
	leader.args = append(leaderArgs, "--replication", "async")
	leader.restart()
	put(t, leaderHTTP, "async", "3")
	want["async"] = "3"
	deadline := time.Now().Add(10 * time.Second)
	for status(t, followerHTTP).MaxOffset < status(t, leaderHTTP).MaxOffset {
		if time.Now().After(deadline) {
			t.Fatal("the follower did not catch up with the async leader")
		}
		time.Sleep(20 * time.Millisecond)
	}
	check(followerHTTP)

	// A new, empty follower copies the leader's whole log (not only its
	// last segment) and rebuilds the same state.
	secondHTTP := freeAddr(t)
	start(t, "second follower", "follower", "--data", filepath.Join(dir, "second"), "--http", secondHTTP,
		"--leader", leaderHA, "--reconnect-delay", "100ms", seg)
	deadline = time.Now().Add(10 * time.Second)
	for status(t, secondHTTP).MaxOffset < status(t, leaderHTTP).MaxOffset {
		if time.Now().After(deadline) {
			t.Fatal("the new follower did not catch up")
		}
		time.Sleep(20 * time.Millisecond)
	}
	check(secondHTTP)
}

// TestSyncWriteWithoutFollower: a sync leader with no follower refuses a
// write after --sync-timeout instead of storing it on one node only.
func TestSyncWriteWithoutFollower(t *testing.T) {
	addr := freeAddr(t)
	start(t, "leader", "leader", "--data", t.TempDir(), "--http", addr, "--ha", freeAddr(t), "--sync-timeout", "200ms", "--segment-size=65536")
	code, out := cli(t, "put", "--addr", addr, "k", "v")
	if code != exitError || !strings.Contains(out, "no follower connected") {
		t.Fatalf("put without follower: exit %d %q", code, out)
	}
	if s := status(t, addr); s.MaxOffset != 0 {
		t.Errorf("refused write reached the log: %+v", s)
	}
}

// TestCLI runs the put, get, delete and status commands against a sync
// leader and its follower.
func TestCLI(t *testing.T) {
	leaderHTTP, leaderHA, followerHTTP := freeAddr(t), freeAddr(t), freeAddr(t)
	start(t, "leader", "leader", "--data", t.TempDir(), "--http", leaderHTTP, "--ha", leaderHA, "--segment-size=65536")
	start(t, "follower", "follower", "--data", t.TempDir(), "--http", followerHTTP, "--leader", leaderHA, "--segment-size=65536")
	if code, out := cli(t, "put", "--addr", leaderHTTP, "color", "blue"); code != 0 || !strings.HasPrefix(out, "PUT_OK offset=0 ") {
		t.Fatalf("put: exit %d %q", code, out)
	}
	if code, out := cli(t, "get", "--addr", followerHTTP, "color"); code != 0 || out != "blue\n" {
		t.Errorf("get: exit %d %q", code, out)
	}
	if code, out := cli(t, "put", "--addr", followerHTTP, "color", "red"); code != exitError || !strings.Contains(out, "follower") {
		t.Errorf("put on the follower: exit %d %q", code, out)
	}
	if code, out := cli(t, "delete", "--addr", leaderHTTP, "color"); code != 0 || !strings.HasPrefix(out, "PUT_OK ") {
		t.Errorf("delete: exit %d %q", code, out)
	}
	if code, out := cli(t, "get", "--addr", followerHTTP, "color"); code != exitError || !strings.Contains(out, "not found") {
		t.Errorf("get after delete: exit %d %q", code, out)
	}
	if code, out := cli(t, "status", "--addr", followerHTTP); code != 0 || !strings.Contains(out, `"role":"follower"`) {
		t.Errorf("status: exit %d %q", code, out)
	}
}

func TestUsage(t *testing.T) {
	if code, _ := cli(t, "nope"); code != exitUsage {
		t.Errorf("unknown command: exit %d", code)
	}
	if code, _ := cli(t, "put", "onlykey"); code != exitUsage {
		t.Errorf("put with one argument: exit %d", code)
	}
	if code, out := cli(t, "leader", "--help"); code != 0 || !strings.Contains(out, "-replication") {
		t.Errorf("leader --help: exit %d %q", code, out)
	}
}
