package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/internal/api"
)

// TestE2ECLI runs put, status and tail against a running master and slave.
func TestE2ECLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := startMaster(t, filepath.Join(dir, "m"), "--replication", "sync", "--slave-timeout", "2s")
	s := startSlave(t, filepath.Join(dir, "s"), m)
	waitSlaves(t, m, 1)

	// Arguments: one message each.
	code, out, errb := runCLI(t, "", "put", "--api", m.api, "--topic", "CliTopic", "--tag", "tagA", "--key", "key1",
		"--property", "color=blue", "--property", "a b=c,d", "--queue", "2", "hello", "hello world")
	if code != 0 {
		t.Fatalf("put: exit %d: %s", code, errb)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "PUT_OK offset=0 ") || !strings.HasPrefix(lines[1], "PUT_OK offset=") {
		t.Fatalf("put output:\n%s", out)
	}
	// Standard input: one message per line; empty lines skipped, and said.
	code, out, errb = runCLI(t, "line one\n\nline two\r\nline three", "put", "--api", m.api)
	if code != 0 || strings.Count(out, "PUT_OK") != 3 || !strings.Contains(errb, "skipped 1 empty line(s)") {
		t.Fatalf("put from stdin: exit %d\n%s%s", code, out, errb)
	}
	// Bad input answered by the server: exit 1 with the server's message.
	code, _, errb = runCLI(t, "", "put", "--api", m.api, "--topic", "bad!topic", "x")
	if code != exitError || !strings.Contains(errb, "not stored") || !strings.Contains(errb, "invalid topic") {
		t.Fatalf("put to a bad topic: exit %d: %s", code, errb)
	}
	// A put on the slave is refused with --no-follow (without it the
	// producer follows the master: put_client_e2e_test.go).
	code, _, errb = runCLI(t, "", "put", "--api", s.api, "--no-follow", "x")
	if code != exitError || !strings.Contains(errb, "slave") || !strings.Contains(errb, "not stored") {
		t.Fatalf("put on the slave: exit %d: %s", code, errb)
	}
	// Nothing listening within --timeout: exit 1.
	code, _, errb = runCLI(t, "", "put", "--api", "http://"+ports(t, 1)[0], "--timeout", "300ms", "x")
	if code != exitError || !strings.Contains(errb, "connection refused") {
		t.Fatalf("put to nowhere: exit %d: %s", code, errb)
	}
	waitCaughtUp(t, m, s)

	// status, text and JSON, on both roles.
	code, out, errb = runCLI(t, "", "status", "--api", m.api)
	if code != 0 || !strings.Contains(out, "SYNC_MASTER") || !strings.Contains(out, "ACK OFFSET") || !strings.Contains(out, m.ha) {
		t.Fatalf("status: exit %d\n%s%s", code, out, errb)
	}
	code, out, _ = runCLI(t, "", "status", "--api", s.api)
	if code != 0 || !strings.Contains(out, "SLAVE") || !strings.Contains(out, "connected") {
		t.Fatalf("slave status: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "status", "--api", s.api, "--json")
	var st api.Status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Role != "SLAVE" || st.Master == nil || st.MaxOffset == 0 {
		t.Fatalf("status --json: exit %d\n%s", code, out)
	}

	// tail from the slave: all five messages, in order.
	code, out, errb = runCLI(t, "", "tail", "--api", s.api)
	if code != 0 {
		t.Fatalf("tail: exit %d: %s", code, errb)
	}
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 {
		t.Fatalf("tail printed %d lines:\n%s", len(lines), out)
	}
	for i, want := range []string{
		`topic=CliTopic queue=2 queue_offset=0 tags=tagA keys=key1 "a b"=c,d color=blue body=hello`,
		`topic=CliTopic queue=2 queue_offset=1 tags=tagA keys=key1 "a b"=c,d color=blue body="hello world"`,
		`topic=TopicTest queue=0 queue_offset=0 body="line one"`,
		`queue_offset=1 body="line two"`,
		`queue_offset=2 body="line three"`,
	} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("tail line %d: %q lacks %q", i, lines[i], want)
		}
	}
	// --from and --json.
	var first api.Message
	code, out, _ = runCLI(t, "", "tail", "--api", m.api, "--json", "--max", "1")
	if code != 0 || json.Unmarshal([]byte(strings.Split(out, "\n")[0]), &first) != nil || string(first.Body) != "hello" {
		t.Fatalf("tail --json: exit %d\n%s", code, out)
	}
	second := first.Offset + int64(first.Size)
	code, out, _ = runCLI(t, "", "tail", "--api", m.api, "--from", fmt.Sprint(second))
	if code != 0 || strings.Count(out, "\n") != 4 || !strings.Contains(out, `body="hello world"`) {
		t.Fatalf("tail --from: exit %d\n%s", code, out)
	}
	code, _, errb = runCLI(t, "", "tail", "--api", m.api, "--from", fmt.Sprint(second+1))
	if code != exitError || !strings.Contains(errb, "400") {
		t.Fatalf("tail from inside a record: exit %d: %s", code, errb)
	}

	// tail --follow prints messages as they arrive and exits 0 on SIGINT.
	cmd := exec.Command(binPath, "tail", "--api", s.api, "--follow", "--from", fmt.Sprint(st.MaxOffset))
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
	for i := range 3 {
		put(t, m.api, "Follow", fmt.Sprintf("followed-%d", i))
		line, err := readLine(rd, waitTimeout)
		if err != nil || !strings.Contains(line, fmt.Sprintf("body=followed-%d", i)) {
			t.Fatalf("follow line %d: %q %v (stderr %s)", i, line, err, stderr.String())
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	io.Copy(io.Discard, rd)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tail --follow after SIGINT: %v (stderr %s)", err, stderr.String())
	}
	s.stop()
	m.stop()
}

// readLine reads one line or gives up after d.
func readLine(rd *bufio.Reader, d time.Duration) (string, error) {
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := rd.ReadString('\n')
		ch <- res{s, err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-time.After(d):
		return "", fmt.Errorf("no line within %s", d)
	}
}

// TestE2EPutExitStatus: put exits 3 when a message is stored without PUT_OK.
// TestE2EPutWaitsForStartingNode: put dials again, up to --timeout, while
// no node accepts a connection yet (a node that is still starting, as in
// the operators guide's controller-mode walk-through).
func TestE2EPutWaitsForStartingNode(t *testing.T) {
	t.Parallel()
	pp := ports(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	put := exec.CommandContext(ctx, binPath, "--log-level", "debug", "put", "--api", "http://"+pp[0], "--timeout", "60s", "early")
	put.Env = cleanEnv()
	var out bytes.Buffer
	put.Stdout = &out
	stderr, err := put.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := put.Start(); err != nil {
		t.Fatal(err)
	}
	// Start the master only once the put has been refused and says it
	// dials again; a put that gives up exits first and fails the test.
	var errb strings.Builder
	sc := bufio.NewScanner(stderr)
	for sc.Scan() && !strings.Contains(sc.Text(), "dialing again") {
		errb.WriteString(sc.Text() + "\n")
	}
	go io.Copy(io.Discard, stderr)
	m := start(t, "master", "--log-level", "info", "master", "--data", filepath.Join(t.TempDir(), "m"),
		"--listen", pp[0], "--ha-listen", pp[1], "--segment-size", testSegment)
	m.api, m.ha = "http://"+pp[0], pp[1]
	m.waitReady()
	if err := put.Wait(); err != nil || !strings.Contains(out.String(), "PUT_OK") {
		t.Fatalf("put before the master listened: %v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
	}
}

func TestE2EPutExitStatus(t *testing.T) {
	t.Parallel()
	m := startMaster(t, filepath.Join(t.TempDir(), "m"), "--replication", "sync", "--slave-timeout", "100ms")
	code, out, errb := runCLI(t, "", "put", "--api", m.api, "x")
	if code != exitNotPutOK || !strings.HasPrefix(out, "SLAVE_NOT_AVAILABLE") {
		t.Fatalf("exit %d\n%s%s", code, out, errb)
	}
	m.stop()
}

// TestE2EDemo runs the demo to its end.
func TestE2EDemo(t *testing.T) {
	t.Parallel()
	code, out, errb := runCLI(t, "", "demo", "--messages", "600", "--size", "2KiB", "--segment-size", "256KiB")
	if code != 0 {
		t.Fatalf("demo: exit %d\n%s\n%s", code, out, errb)
	}
	for _, w := range []string{"writing [", "100%", "slave caught up", "byte-identical", "removes", "--keep"} {
		if !strings.Contains(out, w) {
			t.Errorf("demo output lacks %q:\n%s", w, out)
		}
	}
	// The nodes stop at the end: the summary names no URL of theirs.
	if _, summary, _ := strings.Cut(out, "byte-identical"); strings.Contains(summary, "/v1/status") || strings.Contains(summary, "/metrics") {
		t.Errorf("the summary points at nodes that are about to stop:\n%s", summary)
	}
	// The temporary directory is gone.
	dirLine := strings.SplitN(out, "\n", 2)[0]
	d := strings.TrimPrefix(dirLine, "replicator demo: a master and a slave in ")
	if d == dirLine {
		t.Fatalf("first line %q", dirLine)
	}
	if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("demo left %s behind (%v)", d, err)
	}
}

// TestE2EDemoInterrupt: SIGINT during the demo stops both nodes and removes
// the directory.
func TestE2EDemoInterrupt(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binPath, "demo", "--messages", "10000000", "--size", "1KiB", "--segment-size", "1MiB")
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
	first, err := readLine(rd, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	dir := strings.TrimSpace(strings.TrimPrefix(first, "replicator demo: a master and a slave in "))
	var rest strings.Builder
	for {
		line, err := readLine(rd, waitTimeout)
		if err != nil {
			t.Fatalf("no progress line: %v; output %s; stderr %s", err, rest.String(), stderr.String())
		}
		rest.WriteString(line)
		if strings.HasPrefix(line, "writing [") {
			break
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	tail, _ := io.ReadAll(rd)
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Fatalf("demo after SIGINT: %v; stderr %s", err, stderr.String())
	}
	if !strings.Contains(string(tail), "interrupted; both nodes stopped") {
		t.Errorf("output after SIGINT: %s", tail)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("interrupted demo left %s behind (%v)", dir, err)
	}
}
