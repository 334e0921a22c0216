package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchTiny are flags that make `replicator bench` run in seconds.
var benchTiny = []string{"--size", "4MiB", "--segment-size", "8MiB", "--msg-size", "512", "--duration", "200ms",
	"--limit-size", "8MiB", "--limit-time", "50ms", "--quiet-wait", "0"}

// benchKeys are the keys issue 7 asks every JSON line to carry.
var benchKeys = []string{"scenario", "store", "mb_per_s", "msgs_per_s", "p50_ms", "p99_ms", "p999_ms",
	"lag_p99_ms", "limit_mb_per_s", "ratio_to_limit"}

// benchJSON parses the JSON lines of out and checks the common keys.
func benchJSON(t *testing.T, out string) []map[string]any {
	t.Helper()
	var res []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		for _, k := range benchKeys {
			if _, ok := m[k]; !ok {
				t.Errorf("no key %q in %s", k, line)
			}
		}
		for _, k := range []string{"mb_per_s", "limit_mb_per_s", "ratio_to_limit"} {
			if v, ok := m[k].(float64); !ok || v <= 0 {
				t.Errorf("%s = %v in %s", k, m[k], line)
			}
		}
		res = append(res, m)
	}
	return res
}

func benchPoint(m map[string]any) string {
	return fmt.Sprintf("%v/%v/%v/%v", m["scenario"], m["via"], m["store"], m["producers"])
}

// TestE2EBenchAPI runs every scenario through the daemon's API: master and
// slave as child processes, producers over HTTP.
func TestE2EBenchAPI(t *testing.T) {
	t.Parallel()
	prof := t.TempDir()
	args := append([]string{"bench", "--json", "--via", "api", "--producers", "3", "--dir", t.TempDir(), "--profile", prof}, benchTiny...)
	code, out, errb := runBenchCLI(t, args...)
	if code != 0 {
		t.Fatalf("bench: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errb)
	}
	// --profile: the producers' profile, and the daemons' (their --pprof).
	for _, name := range []string{"sync-api-builtin-p3-run1.cpu.pprof", "async-api-builtin-p3-run1.master.cpu.pprof", "sync-api-builtin-p3-run1.slave.cpu.pprof", "catchup-api-builtin-run1.slave.cpu.pprof"} {
		if fi, err := os.Stat(filepath.Join(prof, name)); err != nil || fi.Size() == 0 {
			t.Errorf("profile %s: %v", name, err)
		}
	}
	res := benchJSON(t, out)
	var points []string
	for _, m := range res {
		points = append(points, benchPoint(m))
		switch m["scenario"] {
		case "catchup":
			if m["msgs_per_s"] != nil || m["p99_ms"] != nil || m["lag_p99_ms"] != nil {
				t.Errorf("catchup: keys that do not apply are not null: %v", m)
			}
			for _, k := range []string{"master_peak_rss_bytes", "slave_peak_rss_bytes", "master_peak_rss_anon_bytes", "slave_peak_rss_file_bytes"} {
				if v, ok := m[k].(float64); !ok || v <= 0 {
					t.Errorf("catchup: %s = %v", k, m[k])
				}
			}
			// CPU per KB: measured when the slave answered before most of
			// the (tiny) log arrived, else null.
			for _, k := range []string{"master_cpu_ns_per_kb", "slave_cpu_ns_per_kb"} {
				if v, ok := m[k].(float64); m[k] != nil && (!ok || v < 0) {
					t.Errorf("catchup: %s = %v", k, m[k])
				}
			}
		case "sync", "async":
			if v, ok := m["msgs_per_s"].(float64); !ok || v <= 0 {
				t.Errorf("%s: msgs_per_s %v", m["scenario"], m["msgs_per_s"])
			}
			if m["not_put_ok"] != 0.0 {
				t.Errorf("%s: not_put_ok %v", m["scenario"], m["not_put_ok"])
			}
			if lag := m["lag_p99_ms"]; (m["scenario"] == "async") != (lag != nil) {
				t.Errorf("%s: lag_p99_ms %v", m["scenario"], lag)
			}
			if m["slave_cpu_ns_per_kb"] != nil {
				t.Errorf("%s: slave_cpu_ns_per_kb %v", m["scenario"], m["slave_cpu_ns_per_kb"])
			}
			// CPU per message of the two daemons and of the producers.
			for _, k := range []string{"master_cpu_us_per_msg", "slave_cpu_us_per_msg", "process_cpu_us_per_msg"} {
				if v, ok := m[k].(float64); !ok || v < 0 {
					t.Errorf("%s: %s = %v", m["scenario"], k, m[k])
				}
			}
		}
	}
	want := "catchup/api/builtin/<nil> sync/api/builtin/3 async/api/builtin/3"
	if got := strings.Join(points, " "); got != want {
		t.Errorf("points %s, want %s", got, want)
	}
	for _, w := range []string{"# limits: loopback TCP", "# catchup via api, builtin store: ", "# async via api, builtin store, 3 producers: "} {
		if !strings.Contains(errb, w) {
			t.Errorf("progress lacks %q:\n%s", w, errb)
		}
	}
}

// TestE2EBenchExternal runs the external commit-log store plugin through
// both the daemon and the library.
func TestE2EBenchExternal(t *testing.T) {
	t.Parallel()
	plugins := pluginBinaries(t)
	args := append([]string{"--plugins", plugins, "bench", "--json", "--store", "external", "--producers", "2", "--dir", t.TempDir()}, benchTiny...)
	args = append(args, "catchup", "sync")
	code, out, errb := runBenchCLI(t, args...)
	if code != 0 {
		t.Fatalf("bench: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errb)
	}
	var points []string
	for _, m := range benchJSON(t, out) {
		points = append(points, benchPoint(m))
		if m["scenario"] == "catchup" {
			if v, ok := m["slave_plugin_peak_rss_bytes"].(float64); !ok || v <= 0 {
				t.Errorf("%s: slave plugin RSS %v", benchPoint(m), m["slave_plugin_peak_rss_bytes"])
			}
		}
	}
	want := "catchup/api/external/<nil> catchup/library/external/<nil> sync/api/external/2 sync/client/external/2 sync/library/external/2"
	if got := strings.Join(points, " "); got != want {
		t.Errorf("points %s, want %s", got, want)
	}
}

// TestE2EBenchTable: without --json the results are a table on stdout,
// progress on stderr; the scratch directory is removed.
func TestE2EBenchTable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := append([]string{"bench", "--via", "library", "--producers", "2", "--dir", dir}, benchTiny...)
	code, out, errb := runBenchCLI(t, append(args, "async")...)
	if code != 0 {
		t.Fatalf("bench: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errb)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "limits (same run): loopback TCP ") ||
		!strings.Contains(lines[2], "lag p99 ms") || !strings.Contains(lines[3], "async  library  builtin") {
		t.Errorf("table:\n%s", out)
	}
	if strings.Contains(out, "#") || !strings.Contains(errb, "# limits:") {
		t.Errorf("progress on stdout or missing on stderr:\nstdout:\n%s\nstderr:\n%s", out, errb)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left behind in %s: %v", dir, ents)
	}
}

// TestE2EBenchUsage: bad scenarios, values and missing plugins exit 2.
func TestE2EBenchUsage(t *testing.T) {
	t.Parallel()
	empty := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--quiet-wait", "0", "nope"}, `unknown scenario "nope"`},
		{[]string{"bench", "--via", "rpc"}, `invalid value "rpc"`},
		{[]string{"bench", "--producers", "0"}, `invalid producer count "0"`},
		{[]string{"--plugins", empty, "bench", "--store", "external"}, "no plugin binary " + filepath.Join(empty, "replicator-store-commitlog")},
		{[]string{"bench", "--size", "1GiB", "--segment-size", "64MiB", "catchup"}, "needs one segment of at least"},
	} {
		code, out, errb := runCLI(t, "", c.args...)
		if code != exitUsage || !strings.Contains(errb, c.want) {
			t.Errorf("%q: exit %d, stderr %q, stdout %q; want exit 2 and %q", c.args, code, errb, out, c.want)
		}
	}
	code, out, _ := runCLI(t, "", "bench", "--help")
	if code != 0 || !strings.Contains(out, "Usage: replicator [global flags] bench") || !strings.Contains(out, "--producers") {
		t.Errorf("bench --help: exit %d\n%s", code, out)
	}
}
