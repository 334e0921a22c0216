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
	code, out, errb := runBenchCLI(t, append(args, "sync", "async")...)
	if code != 0 {
		t.Fatalf("bench: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errb)
	}
	got := map[string]bool{}
	for _, m := range benchJSON(t, out) {
		got[benchPoint(m)] = true
		if v, ok := m["msgs_per_s"].(float64); !ok || v <= 0 {
			t.Errorf("%s: msgs_per_s %v", benchPoint(m), m["msgs_per_s"])
		}
		// The cross-process round trip (the hidden `bench __rtt-echo`
		// child) reaches every point's JSON, and the client floor counts
		// its two links.
		if v, ok := m["tcp_rtt_xproc_p50_ms"].(float64); !ok || v <= 0 {
			t.Errorf("%s: tcp_rtt_xproc_p50_ms %v", benchPoint(m), m["tcp_rtt_xproc_p50_ms"])
		}
		if m["via"] == "client" && m["scenario"] == "sync" && m["floor_links"] != float64(2) {
			t.Errorf("%s: floor_links %v, want 2", benchPoint(m), m["floor_links"])
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
