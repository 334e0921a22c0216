package childproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// modeVar makes the test binary act as a child (it is not a REPLICATOR_*
// variable, so Start passes it on).
const modeVar = "CHILDPROC_TEST_MODE"

func TestMain(m *testing.M) {
	if mode := os.Getenv(modeVar); mode != "" {
		os.Exit(child(mode))
	}
	goleak.VerifyTestMain(m)
}

// child runs one of the test modes and returns the exit code.
func child(mode string) int {
	switch mode {
	case "wait": // until SIGTERM, then exit 0
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		fmt.Println("waiting")
		<-ch
		return 0
	case "stubborn": // ignores SIGTERM
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ignoring SIGTERM")
		select {}
	case "fail": // 15 lines, exit 3
		for i := 1; i <= 15; i++ {
			fmt.Printf("line %d\n", i)
		}
		return 3
	case "env":
		for _, kv := range os.Environ() {
			fmt.Println(kv)
		}
		return 0
	case "http": // /readyz: 503 twice, then 200; the address in CHILDPROC_ADDR_FILE
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 1
		}
		var calls atomic.Int32
		http.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if calls.Add(1) <= 2 {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		})
		tmp := os.Getenv("CHILDPROC_ADDR_FILE") + ".tmp"
		if os.WriteFile(tmp, []byte(ln.Addr().String()), 0o644) != nil || os.Rename(tmp, os.Getenv("CHILDPROC_ADDR_FILE")) != nil {
			return 1
		}
		go http.Serve(ln, nil)
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		<-ch
		return 0
	}
	return 2
}

func start(t *testing.T, mode, log string, appendLog bool) *Proc {
	t.Helper()
	t.Setenv(modeVar, mode)
	p, err := Start(Config{Exe: os.Args[0], Name: mode, Log: log, Append: appendLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.Done()
	})
	return p
}

func waitLog(t *testing.T, p *Proc, want string) {
	t.Helper()
	err := Poll(context.Background(), p, 30*time.Second, 5*time.Millisecond, func() error {
		b, _ := os.ReadFile(p.Log())
		if !strings.Contains(string(b), want) {
			return fmt.Errorf("%q not in the log yet", want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStopClean: a child that exits 0 on SIGTERM stops with no error; its
// log directory was created.
func TestStopClean(t *testing.T) {
	p := start(t, "wait", filepath.Join(t.TempDir(), "sub", "wait.log"), false)
	waitLog(t, p, "waiting")
	if err := p.Stop(30 * time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if p.Err() != nil {
		t.Fatalf("Err after a clean stop: %v", p.Err())
	}
	if err := p.Stop(time.Second); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// TestStopKills: a child that ignores SIGTERM is killed after the timeout,
// and Stop says so.
func TestStopKills(t *testing.T) {
	p := start(t, "stubborn", filepath.Join(t.TempDir(), "stubborn.log"), false)
	waitLog(t, p, "ignoring SIGTERM")
	err := p.Stop(20 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not stop within 20ms; killed") {
		t.Fatalf("Stop: %v, want a kill after the timeout", err)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
}

// TestExited: an early exit is described with the log's last TailLines
// lines, and Stop reports the exit status as an *exec.ExitError.
func TestExited(t *testing.T) {
	p := start(t, "fail", filepath.Join(t.TempDir(), "fail.log"), false)
	<-p.Done()
	msg := p.Exited().Error()
	if !strings.Contains(msg, "exit status 3") || !strings.Contains(msg, "line 15") || !strings.Contains(msg, "line 6\n") || strings.Contains(msg, "line 5\n") {
		t.Fatalf("Exited: %q, want the exit status and lines 6 to 15", msg)
	}
	var ee *exec.ExitError
	if err := p.Stop(time.Second); !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(err.Error(), p.Log()) {
		t.Fatalf("Stop after the exit: %v, want exit code 3 and the log's path", err)
	}
}

// TestEnvAndAppend: the child gets no REPLICATOR_* variable; Append keeps
// the log, its absence truncates it.
func TestEnvAndAppend(t *testing.T) {
	t.Setenv("REPLICATOR_CHILDPROC_SECRET", "x")
	t.Setenv("CHILDPROC_KEPT", "y")
	log := filepath.Join(t.TempDir(), "env.log")
	run := func(appendLog bool) string {
		p := start(t, "env", log, appendLog)
		<-p.Done()
		if p.Err() != nil {
			t.Fatal(p.Exited())
		}
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	first := run(false)
	if strings.Contains(first, "REPLICATOR_CHILDPROC_SECRET") || !strings.Contains(first, "CHILDPROC_KEPT=y") {
		t.Fatalf("child environment:\n%s", first)
	}
	if got := run(true); got != first+first {
		t.Fatalf("appended log is %d bytes, want twice %d", len(got), len(first))
	}
	if got := run(false); got != first {
		t.Fatalf("truncated log is %d bytes, want %d", len(got), len(first))
	}
}

// TestWaitReady: WaitReady returns once /readyz answers 200; on a child
// that exits it returns Exited's description.
func TestWaitReady(t *testing.T) {
	dir := t.TempDir()
	addrFile := filepath.Join(dir, "addr")
	t.Setenv("CHILDPROC_ADDR_FILE", addrFile)
	p := start(t, "http", filepath.Join(dir, "http.log"), false)
	var addr []byte
	if err := Poll(context.Background(), p, 30*time.Second, 5*time.Millisecond, func() (err error) {
		addr, err = os.ReadFile(addrFile)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	if err := p.WaitReady(context.Background(), hc, "http://"+string(addr), 30*time.Second, time.Millisecond); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	if err := p.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	f := start(t, "fail", filepath.Join(dir, "fail.log"), false)
	err := f.WaitReady(context.Background(), hc, "http://127.0.0.1:1", 30*time.Second, time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "exited (exit status 3)") {
		t.Fatalf("WaitReady on an exiting child: %v", err)
	}
}

// TestPollEnds: Poll ends with cond's error wrapped at the timeout, with
// ctx's error when ctx ends, and at once when cond holds.
func TestPollEnds(t *testing.T) {
	errNo := errors.New("no")
	err := Poll(context.Background(), nil, 0, time.Millisecond, func() error { return errNo })
	if !errors.Is(err, errNo) || !strings.Contains(err.Error(), "the cluster: not within 0s") {
		t.Fatalf("timeout: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Poll(ctx, nil, time.Hour, time.Hour, func() error { return errNo }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	n := 0
	if err := Poll(context.Background(), nil, time.Hour, time.Millisecond, func() error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("cond holds: %v after %d calls", err, n)
	}
}
