package proctest

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/internal/freeport"
)

// Poll settings for waiting on other processes.
const (
	PollEvery = 10 * time.Millisecond
	// WaitTimeout bounds every wait for a process (start, exit, catch-up).
	WaitTimeout = 60 * time.Second
)

// Build compiles cmd/replicator into a new temporary directory (with the
// race detector when race is true) and returns the binary's path and a
// function that removes the directory.
func Build(race bool) (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "replicator-proctest-")
	if err != nil {
		return "", nil, fmt.Errorf("proctest: %w", err)
	}
	cleanup = func() { os.RemoveAll(dir) }
	bin = filepath.Join(dir, "replicator")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "github.com/replicatorhq/replicator/cmd/replicator")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("proctest: building replicator: %w\n%s", err, out)
	}
	return bin, cleanup, nil
}

// Eventually polls cond every PollEvery until it returns nil or timeout
// passes; then the test fails with the last error.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := Poll(timeout, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Poll calls cond every PollEvery until it returns nil (Poll returns nil)
// or timeout passes (Poll returns the last error).
func Poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s: %w", timeout, err)
		}
		time.Sleep(PollEvery)
	}
}

// FreeAddrs returns n distinct free 127.0.0.1 TCP addresses.
func FreeAddrs(n int) ([]string, error) { return freeport.Addrs(n) }

// Proc is a replicator process. Its methods are for the test goroutine;
// Exited may be called from any goroutine.
type Proc struct {
	t    testing.TB
	Name string
	Bin  string
	Args []string
	// Log is the file that collects the process's stdout and stderr over
	// all its runs.
	Log string
	// API is the node's API base URL (http://host:port); HA a master's HA
	// address. Set by StartMaster and StartSlave.
	API, HA string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	runs int
}

// Start runs bin with args. The process is killed (SIGKILL) and reaped when
// the test ends, and its log is shown when the test failed.
func Start(t testing.TB, bin, name string, args ...string) *Proc {
	t.Helper()
	p := &Proc{t: t, Name: name, Bin: bin, Args: args, Log: filepath.Join(t.TempDir(), name+".log")}
	p.launch()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(p.Log)
			if len(b) > 64<<10 {
				b = append([]byte("...\n"), b[len(b)-64<<10:]...)
			}
			t.Logf("--- log of %s:\n%s", p.Name, b)
		}
	})
	return p
}

func (p *Proc) launch() {
	p.t.Helper()
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatalf("proctest: %v", err)
	}
	p.runs++
	fmt.Fprintf(f, "=== run %d: %s %s\n", p.runs, p.Bin, strings.Join(p.Args, " "))
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = CleanEnv()
	if err := cmd.Start(); err != nil {
		f.Close()
		p.t.Fatalf("proctest: start %s: %v", p.Name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.err = cmd, done, nil
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
}

// CleanEnv is the environment without REPLICATOR_* variables.
func CleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REPLICATOR_") {
			env = append(env, kv)
		}
	}
	return env
}

func (p *Proc) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

// Exited reports whether the current run has ended, and how.
func (p *Proc) Exited() (bool, error) {
	_, done := p.current()
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.err
	default:
		return false, nil
	}
}

// kill sends SIGKILL (after SIGCONT, in case it was stopped) and reaps.
func (p *Proc) kill() {
	cmd, done := p.current()
	select {
	case <-done:
		return
	default:
	}
	cmd.Process.Signal(syscall.SIGCONT)
	cmd.Process.Kill()
	<-done
}

// Kill is kill -9: SIGKILL, then wait until the process is reaped.
func (p *Proc) Kill() {
	p.t.Helper()
	p.kill()
}

// Signal sends sig to the current run.
func (p *Proc) Signal(sig syscall.Signal) {
	cmd, _ := p.current()
	cmd.Process.Signal(sig)
}

// Stop sends SIGTERM and requires a clean exit (status 0) within
// WaitTimeout.
func (p *Proc) Stop() {
	p.t.Helper()
	if err := p.Wait(syscall.SIGTERM); err != nil {
		p.t.Fatalf("%s after SIGTERM: %v", p.Name, err)
	}
}

// Wait sends sig (unless 0) and waits up to WaitTimeout for the exit; it
// returns the exit error (nil for status 0).
func (p *Proc) Wait(sig syscall.Signal) error {
	cmd, done := p.current()
	if sig != 0 {
		cmd.Process.Signal(sig)
	}
	select {
	case <-done:
	case <-time.After(WaitTimeout):
		return fmt.Errorf("%s did not exit within %s", p.Name, WaitTimeout)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Restart starts the process again with the same arguments (the last run
// must have ended) and waits until it is ready.
func (p *Proc) Restart() {
	p.t.Helper()
	if ok, _ := p.Exited(); !ok {
		p.t.Fatalf("proctest: restart of %s while it runs", p.Name)
	}
	p.launch()
	p.WaitReady()
}

// Relaunch starts the process again with the same arguments (the last
// run must have ended) and returns at once, without waiting for it to be
// ready: for a kill in the middle of its start.
func (p *Proc) Relaunch() {
	p.t.Helper()
	if ok, _ := p.Exited(); !ok {
		p.t.Fatalf("proctest: relaunch of %s while it runs", p.Name)
	}
	p.launch()
}

// WaitReady waits until /readyz answers 200; it fails the test when the
// process exits first.
func (p *Proc) WaitReady() {
	p.t.Helper()
	if err := p.waitReady(); err != nil {
		p.t.Fatal(err)
	}
}

// errExited is waitReady's error when the process exited first.
var errExited = errors.New("exited before it was ready")

func (p *Proc) waitReady() error { return p.waitOK("/readyz", "ready") }

// waitOK polls p.API+path until it answers 200; what names the wait in
// its error. It fails early with errExited when the process exits first.
func (p *Proc) waitOK(path, what string) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	var exited error
	err := Poll(WaitTimeout, func() error {
		if ok, err := p.Exited(); ok {
			exited = fmt.Errorf("%s %w: %v", p.Name, errExited, err)
			return nil
		}
		resp, err := hc.Get(p.API + path)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s %d", path, resp.StatusCode)
		}
		return nil
	})
	if exited != nil {
		return exited
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", p.Name, what, err)
	}
	return nil
}

// startOnFreePorts starts a node with start(ports) on n free ports and
// waits until it is ready. A port found free can be taken by another test
// before the child binds it; a child that exits on "address already in
// use" is started again on other ports, up to three times.
func startOnFreePorts(t testing.TB, n int, start func(ports []string) *Proc) *Proc {
	t.Helper()
	for attempt := 1; ; attempt++ {
		pp, err := FreeAddrs(n)
		if err != nil {
			t.Fatal(err)
		}
		p := start(pp)
		err = p.waitReady()
		if err == nil {
			return p
		}
		if attempt < 3 && errors.Is(err, errExited) && strings.Contains(p.ReadLog(), "address already in use") {
			t.Logf("proctest: %s lost a port to another test, starting it again: %v", p.Name, err)
			continue
		}
		t.Fatal(err)
	}
}

// ReadLog returns the process's log so far.
func (p *Proc) ReadLog() string {
	b, err := os.ReadFile(p.Log)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		p.t.Fatalf("proctest: %v", err)
	}
	return string(b)
}

// StartMaster starts `replicator master` with data in dir on free ports
// and waits until it is ready. extra flags follow the defaults and win.
func StartMaster(t testing.TB, bin, dir string, extra ...string) *Proc {
	t.Helper()
	return startOnFreePorts(t, 2, func(pp []string) *Proc {
		args := append([]string{"--log-level", "info", "master", "--data", dir, "--listen", pp[0], "--ha-listen", pp[1],
			"--segment-size", "1MiB"}, extra...)
		p := Start(t, bin, "master", args...)
		p.API, p.HA = "http://"+pp[0], pp[1]
		return p
	})
}

// StartSlave starts `replicator slave` with data in dir following the
// master at haAddr (its API at masterAPI) and waits until it is ready.
func StartSlave(t testing.TB, bin, dir, haAddr, masterAPI string, extra ...string) *Proc {
	t.Helper()
	return startOnFreePorts(t, 1, func(pp []string) *Proc {
		args := append([]string{"--log-level", "info", "slave", "--data", dir, "--listen", pp[0], "--master", haAddr,
			"--master-api", masterAPI, "--segment-size", "1MiB", "--reconnect-delay", "100ms", "--metadata-interval", "1s"}, extra...)
		p := Start(t, bin, "slave", args...)
		p.API = "http://" + pp[0]
		return p
	})
}
