package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestE2EBenchClient runs sync and async through the producer stream
// (daemons as child processes, producers through package client), and the
// Redis peer when redis-server is installed.
func TestE2EBenchClient(t *testing.T) {
	t.Parallel()
	args := append([]string{"bench", "--json", "--via", "client", "--producers", "3", "--dir", t.TempDir()}, benchTiny...)
	_, redisErr := exec.LookPath("redis-server")
	if redisErr == nil {
		args = append(args, "--peers", "redis")
	}
	code, out, errb := runCLI(t, "", append(args, "sync", "async")...)
	if code != 0 {
		t.Fatalf("bench: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errb)
	}
	got := map[string]bool{}
	for _, m := range benchJSON(t, out) {
		got[benchPoint(m)] = true
		if v, ok := m["msgs_per_s"].(float64); !ok || v <= 0 {
			t.Errorf("%s: msgs_per_s %v", benchPoint(m), m["msgs_per_s"])
		}
	}
	want := []string{"sync/client/builtin/3", "async/client/builtin/3"}
	if redisErr == nil {
		want = append(want, "sync/redis/redis/3", "sync/redis-p16/redis/3")
	} else {
		t.Logf("redis-server not installed: the Redis peer is not measured")
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("no result for %s in:\n%s", w, out)
		}
	}
	if !strings.Contains(errb, "# sync via client, builtin store, 3 producers: ") {
		t.Errorf("no progress line for sync via client:\n%s", errb)
	}
}
