package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// failoverDemoArgs is the short variant of demo --failover the tests run:
// a 2 s lease (etcd's minimum), no election delay, half-second phases,
// two producers.
var failoverDemoArgs = []string{"demo", "--failover", "--lease-ttl", "2s", "--election-delay", "0s", "--phase", "500ms",
	"--concurrency", "2", "--size", "512", "--segment-size", "1MiB"}

// failoverDemoTimeout bounds one run of the short variant.
const failoverDemoTimeout = 3 * time.Minute

// demoPIDs returns the pids the failover demo printed (controller, nodes,
// the restarted node).
func demoPIDs(out string) []int {
	var pids []int
	for _, m := range regexp.MustCompile(`pid (\d+)`).FindAllStringSubmatch(out, -1) {
		if n, err := strconv.Atoi(m[1]); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

// checkGone fails the test for a demo directory or a child process that
// outlived the demo.
func checkGone(t *testing.T, dir string, pids []int) {
	t.Helper()
	if dir == "" {
		t.Fatal("no demo directory in the output")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the demo left %s behind (%v)", dir, err)
	}
	if len(pids) == 0 {
		t.Fatal("no pid in the output")
	}
	for _, pid := range pids {
		// The demo waited for its children: their pids are gone (unless
		// reused, which is rare within a test).
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("child pid %d still exists after the demo (%v)", pid, err)
		}
	}
}

// TestE2EDemoFailover runs demo --failover (short variant) to its end:
// every milestone is printed, the directory is removed and no child
// survives.
func TestE2EDemoFailover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), failoverDemoTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, failoverDemoArgs...)
	cmd.Env = cleanEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo --failover: %v\n%s\n%s", err, out.String(), errb.String())
	}
	s := out.String()
	for _, w := range []string{
		"a controller and 3 nodes in ",
		"is master at epoch ",
		"writing ",
		"kill -9 node ",
		"elected master at epoch ",
		"first PUT_OK on the new master (",
		"in the window (kill to each producer's first PUT_OK on the new master): ",
		"restarting node ",
		"rejoined as a slave of node ",
		"is in the in-sync set again",
		"stopped the producers after ",
		"commit logs byte-identical",
		"is in the final log at its offset",
		"removes",
	} {
		if !strings.Contains(s, w) {
			t.Errorf("demo --failover output lacks %q:\n%s", w, s)
		}
	}
	// The killed master and the elected one differ, and the new epoch is
	// newer.
	kill := regexp.MustCompile(`kill -9 node (\d) \(the master, epoch (\d+)`).FindStringSubmatch(s)
	elected := regexp.MustCompile(`node (\d) elected master at epoch (\d+)`).FindStringSubmatch(s)
	if kill == nil || elected == nil {
		t.Fatalf("no kill or election line:\n%s", s)
	}
	if kill[1] == elected[1] {
		t.Errorf("the killed node %s was elected again:\n%s", kill[1], s)
	}
	oldEpoch, _ := strconv.Atoi(kill[2])
	newEpoch, _ := strconv.Atoi(elected[2])
	if newEpoch <= oldEpoch {
		t.Errorf("the new epoch %d is not newer than %d:\n%s", newEpoch, oldEpoch, s)
	}
	if !regexp.MustCompile(`every PUT_OK message \([1-9]\d*\) is in the final log`).MatchString(s) {
		t.Errorf("no PUT_OK message was checked:\n%s", s)
	}
	first := strings.SplitN(s, "\n", 2)[0]
	_, dir, _ := strings.Cut(first, "nodes in ")
	checkGone(t, strings.TrimSpace(dir), demoPIDs(s))
}

// TestE2EDemoFailoverInterrupt: SIGINT while the producers write stops
// the nodes and the controller, removes the directory and exits 130.
func TestE2EDemoFailoverInterrupt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), failoverDemoTimeout)
	defer cancel()
	args := append(append([]string{}, failoverDemoArgs...), "--phase", "1h")
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = cleanEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(stdout)
	var head strings.Builder
	for {
		line, err := readLine(rd, time.Minute)
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("no writing line: %v; output %s; stderr %s", err, head.String(), stderr.String())
		}
		head.WriteString(line)
		if strings.HasPrefix(line, "writing ") {
			break
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	tail, _ := io.ReadAll(rd)
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Fatalf("demo --failover after SIGINT: %v; stderr %s", err, stderr.String())
	}
	if !strings.Contains(string(tail), "interrupted; the nodes and the controller stopped") {
		t.Errorf("output after SIGINT: %s", tail)
	}
	first := strings.SplitN(head.String(), "\n", 2)[0]
	_, dir, _ := strings.Cut(first, "nodes in ")
	checkGone(t, strings.TrimSpace(dir), demoPIDs(head.String()))
}
