package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/internal/api"
)

// binPath is the replicator binary built once for the end-to-end tests.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "replicator-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "replicator")
	args := []string{"build", "-o", binPath}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append(args, ".")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building replicator:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Poll settings for waiting on other processes.
const (
	pollEvery   = 10 * time.Millisecond
	waitTimeout = 30 * time.Second
)

// eventually polls cond every pollEvery until it returns nil or waitTimeout
// passes; then the test fails with the last error.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, waitTimeout, err)
		}
		time.Sleep(pollEvery)
	}
}

// proc is a running replicator process.
type proc struct {
	t    *testing.T
	name string
	args []string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
	api  string // http://host:port
	ha   string // master's HA address
}

// start runs the binary with args; its output goes to a log file shown if
// the test fails.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, args: args, log: filepath.Join(t.TempDir(), name+".log")}
	p.launch()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Signal(syscall.SIGCONT)
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("--- log of %s (%s):\n%s", p.name, strings.Join(p.args, " "), b)
		}
	})
	return p
}

func (p *proc) launch() {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	fmt.Fprintf(f, "=== %s %s\n", binPath, strings.Join(p.args, " "))
	p.cmd = exec.Command(binPath, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.Env = cleanEnv()
	if err := p.cmd.Start(); err != nil {
		f.Close()
		p.t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		p.err = cmd.Wait()
		f.Close()
		close(done)
	}(p.cmd, p.done)
}

// cleanEnv is the environment without REPLICATOR_* variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REPLICATOR_") {
			env = append(env, kv)
		}
	}
	return env
}

// restart starts the process again with the same arguments.
func (p *proc) restart() {
	p.t.Helper()
	p.launch()
	p.waitReady()
}

func (p *proc) waitReady() {
	p.t.Helper()
	eventually(p.t, p.name+" ready", func() error {
		select {
		case <-p.done:
			p.t.Fatalf("%s exited early: %v", p.name, p.err)
		default:
		}
		resp, err := http.Get(p.api + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})
}

// stop sends SIGTERM and requires a clean exit (status 0).
func (p *proc) stop() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(waitTimeout):
		p.t.Fatalf("%s did not exit within %s of SIGTERM", p.name, waitTimeout)
	}
	if p.err != nil {
		p.t.Fatalf("%s exited with %v after SIGTERM", p.name, p.err)
	}
}

// wait waits for the process to exit (after a signal sent earlier) and
// requires status 0.
func (p *proc) wait() {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(waitTimeout):
		p.t.Fatalf("%s did not exit within %s", p.name, waitTimeout)
	}
	if p.err != nil {
		p.t.Fatalf("%s exited with %v", p.name, p.err)
	}
}

func (p *proc) signal(sig syscall.Signal) { p.cmd.Process.Signal(sig) }

// pause stops the process with SIGSTOP and waits until every one of its
// threads is stopped: the stop is asynchronous, and a thread still running
// could, for instance, still send an ack.
func (p *proc) pause() {
	p.t.Helper()
	p.signal(syscall.SIGSTOP)
	eventually(p.t, p.name+" stopped", func() error {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", p.cmd.Process.Pid))
		if err != nil || len(tasks) == 0 {
			return fmt.Errorf("no threads listed: %v", err)
		}
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			// pid (comm) state ...: the state follows the last ')'.
			i := bytes.LastIndexByte(b, ')')
			if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
				return fmt.Errorf("%s not stopped yet", f)
			}
		}
		return nil
	})
}

// node options shared by the tests: small segments so tests stay fast.
const testSegment = "1MiB"

func ports(t *testing.T, n int) []string {
	t.Helper()
	ps, err := freePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, n)
	for i, p := range ps {
		out[i] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	return out
}

// startMaster starts a master in dir on free ports.
func startMaster(t *testing.T, dir string, extra ...string) *proc {
	t.Helper()
	pp := ports(t, 2)
	args := append([]string{"--log-level", "info", "master", "--data", dir, "--listen", pp[0], "--ha-listen", pp[1],
		"--segment-size", testSegment}, extra...)
	p := start(t, "master", args...)
	p.api, p.ha = "http://"+pp[0], pp[1]
	p.waitReady()
	return p
}

// startSlave starts a slave in dir following m.
func startSlave(t *testing.T, dir string, m *proc, extra ...string) *proc {
	t.Helper()
	pp := ports(t, 1)
	args := append([]string{"--log-level", "info", "slave", "--data", dir, "--listen", pp[0], "--master", m.ha,
		"--master-api", m.api, "--segment-size", testSegment, "--reconnect-delay", "100ms", "--metadata-interval", "1s"}, extra...)
	p := start(t, "slave", args...)
	p.api = "http://" + pp[0]
	p.waitReady()
	return p
}

// httpDo sends a request and returns the status code and body.
func httpDo(t *testing.T, method, url string, hdr http.Header, body []byte) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// put stores one message and returns the answer, failing the test on
// anything but 200.
func put(t *testing.T, apiURL, topic, body string) api.PutAnswer {
	t.Helper()
	code, b := httpDo(t, "POST", apiURL+"/v1/topics/"+topic+"/messages", nil, []byte(body))
	if code != 200 {
		t.Fatalf("put: %d %s", code, b)
	}
	var ans api.PutAnswer
	if err := json.Unmarshal(b, &ans); err != nil {
		t.Fatal(err)
	}
	return ans
}

func status(t *testing.T, apiURL string) api.Status {
	t.Helper()
	c := newClient(apiURL, 10*time.Second)
	defer c.hc.CloseIdleConnections()
	st, err := c.status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// readAll reads every message of a node from offset from.
func readAll(t *testing.T, apiURL string, from int64) []api.Message {
	t.Helper()
	c := newClient(apiURL, 10*time.Second)
	defer c.hc.CloseIdleConnections()
	var out []api.Message
	off := from
	for {
		page, err := c.messages(context.Background(), off, 1024, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Messages...)
		if page.NextOffset == off || page.NextOffset >= page.MaxOffset {
			return out
		}
		off = page.NextOffset
	}
}

// waitCaughtUp waits until the slave's max offset equals the master's.
func waitCaughtUp(t *testing.T, m, s *proc) {
	t.Helper()
	eventually(t, "slave caught up", func() error {
		ms, ss := status(t, m.api), status(t, s.api)
		if ms.MaxOffset != ss.MaxOffset {
			return fmt.Errorf("master max %d, slave max %d", ms.MaxOffset, ss.MaxOffset)
		}
		return nil
	})
}

// waitSlaves waits until the master sees n slaves.
func waitSlaves(t *testing.T, m *proc, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d slave(s) connected", n), func() error {
		if got := len(status(t, m.api).Slaves); got != n {
			return fmt.Errorf("%d slaves", got)
		}
		return nil
	})
}

// runCLI runs the binary to completion and returns its exit code and output.
func runCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	return runCLIEnv(t, nil, stdin, args...)
}

// runCLIEnv is runCLI with extra environment variables.
func runCLIEnv(t *testing.T, env []string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	return runCLIWithin(t, 2*waitTimeout, env, stdin, args...)
}

// benchTimeout bounds a `replicator bench` run of the tests: tiny
// scenarios, but each starts daemons and measures the limits first, and
// the bench tests run beside each other and other packages' tests.
const benchTimeout = 4 * time.Minute

// runBenchCLI runs `replicator bench` (args after the global flags) to
// completion within benchTimeout.
func runBenchCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runCLIWithin(t, benchTimeout, nil, "", args...)
}

// runCLIWithin is runCLIEnv with its own time limit.
func runCLIWithin(t *testing.T, limit time.Duration, env []string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}
