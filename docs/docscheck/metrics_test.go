package docscheck

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

const (
	dashboardPath  = "examples/grafana/replicator-dashboard.json"
	alertsPath     = "examples/prometheus/replicator-alerts.yml"
	alertTestsPath = "examples/prometheus/replicator-alerts.test.yml"
)

var (
	scanOnce  sync.Once
	scanned   map[string]string
	scanError error
)

func codeMetrics(t *testing.T) map[string]string {
	t.Helper()
	scanOnce.Do(func() { scanned, scanError = ScanMetrics(root) })
	if scanError != nil {
		t.Fatal(scanError)
	}
	known := scanned
	// The scanner must see each way the code names metrics.
	for _, n := range []string{
		"replicator_ha_slave_lag_bytes",             // core's opts(name, help) helper
		"replicator_ha_sync_wait_duration_seconds",  // Namespace/Subsystem constants
		"replicator_commitlog_flush_timeouts_total", // function-local constants
		"replicator_plugin_crashes_total",           // a literal Name
		"replicator_node_max_offset_bytes",          // a literal passed to a helper
	} {
		if _, ok := known[n]; !ok {
			t.Errorf("ScanMetrics missed %s", n)
		}
	}
	return known
}

func readFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestOperatorsDocumentsEveryMetric: docs/operators.md names every metric
// the code registers, and no metric the code does not have.
func TestOperatorsDocumentsEveryMetric(t *testing.T) {
	known := codeMetrics(t)
	text := readFile(t, "docs/operators.md")
	mentioned := map[string]bool{}
	for _, n := range MetricRefs(text) {
		mentioned[n] = true
		if !KnownMetric(known, n) {
			t.Errorf("docs/operators.md mentions %s, which no Go file defines", n)
		}
	}
	var missing []string
	for n, file := range known {
		if !mentioned[n] {
			missing = append(missing, n+" ("+file+")")
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("docs/operators.md does not document the metric %s", m)
	}
}

// grafanaPanel is the part of a Grafana panel the check reads.
type grafanaPanel struct {
	Title   string                  `json:"title"`
	Type    string                  `json:"type"`
	Targets []struct{ Expr string } `json:"targets"`
	Panels  []grafanaPanel          `json:"panels"` // collapsed rows
}

// TestGrafanaDashboard: the dashboard is valid JSON with a title, a uid
// and panels whose queries use only metrics the code defines.
func TestGrafanaDashboard(t *testing.T) {
	known := codeMetrics(t)
	var dash struct {
		UID           string         `json:"uid"`
		Title         string         `json:"title"`
		SchemaVersion int            `json:"schemaVersion"`
		Panels        []grafanaPanel `json:"panels"`
	}
	if err := json.Unmarshal([]byte(readFile(t, dashboardPath)), &dash); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if dash.UID == "" || dash.Title == "" || dash.SchemaVersion == 0 {
		t.Errorf("%s: uid %q, title %q, schemaVersion %d: all three are required", dashboardPath, dash.UID, dash.Title, dash.SchemaVersion)
	}
	var walk func([]grafanaPanel)
	queries := 0
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", dashboardPath, p.Title)
			}
			for _, tg := range p.Targets {
				queries++
				refs := MetricRefs(tg.Expr)
				if len(refs) == 0 {
					t.Errorf("%s: panel %q: query %q uses no replicator metric", dashboardPath, p.Title, tg.Expr)
				}
				for _, n := range refs {
					if !KnownMetric(known, n) {
						t.Errorf("%s: panel %q: %s is not a metric of the code", dashboardPath, p.Title, n)
					}
				}
			}
		}
	}
	walk(dash.Panels)
	if queries < 8 {
		t.Errorf("%s: only %d queries", dashboardPath, queries)
	}
}

// TestAlertRulesUseRealMetrics checks the metric names of the alert rules
// (and of their unit tests' input series) without promtool.
func TestAlertRulesUseRealMetrics(t *testing.T) {
	known := codeMetrics(t)
	for _, p := range []string{alertsPath, alertTestsPath} {
		text := readFile(t, p)
		refs := MetricRefs(text)
		if len(refs) == 0 {
			t.Errorf("%s mentions no replicator metric", p)
		}
		for _, n := range refs {
			if !KnownMetric(known, n) {
				t.Errorf("%s: %s is not a metric of the code", p, n)
			}
		}
	}
	rules := readFile(t, alertsPath)
	for _, alert := range []string{"ReplicatorReplicationLagHigh", "ReplicatorSlaveDisconnected", "ReplicatorSyncTimeouts", "ReplicatorPluginCrashed"} {
		if !strings.Contains(rules, "alert: "+alert) {
			t.Errorf("%s: no alert %s", alertsPath, alert)
		}
	}
}

// TestAlertRulesPromtool runs promtool's syntax check and the rules' unit
// tests when promtool is installed.
func TestAlertRulesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian: apt-get install prometheus): alert rules checked without it")
	}
	for _, args := range [][]string{
		{"check", "rules", alertsPath},
		{"test", "rules", alertTestsPath},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
