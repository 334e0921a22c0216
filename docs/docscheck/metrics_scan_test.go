package docscheck

import (
	"strings"
	"testing"
)

func TestKnownMetricSuffixes(t *testing.T) {
	known := map[string]string{"replicator_ha_sync_wait_duration_seconds": "x"}
	for name, want := range map[string]bool{
		"replicator_ha_sync_wait_duration_seconds":        true,
		"replicator_ha_sync_wait_duration_seconds_bucket": true,
		"replicator_ha_sync_wait_duration_seconds_count":  true,
		"replicator_ha_sync_wait_duration":                false,
		"replicator_ha_nope_total":                        false,
	} {
		if got := KnownMetric(known, name); got != want {
			t.Errorf("KnownMetric(%s) = %v, want %v", name, got, want)
		}
	}
}

func TestPortsAndScript(t *testing.T) {
	text := "bin/replicator master --listen 127.0.0.1:10911 --ha-listen 0.0.0.0:10912   # API :10911\nbin/replicator put --api http://127.0.0.1:10911 x\n"
	if got := Ports(text); len(got) != 2 || got[0] != 10911 || got[1] != 10912 {
		t.Fatalf("Ports = %v", got)
	}
	mapped := MapPorts(text, map[int]int{10911: 40001, 10912: 40002})
	want := "bin/replicator master --listen 127.0.0.1:40001 --ha-listen 0.0.0.0:40002   # API :40001\nbin/replicator put --api http://127.0.0.1:40001 x\n"
	if mapped != want {
		t.Fatalf("MapPorts:\n%s\nwant\n%s", mapped, want)
	}
	d := ParseDoc("x.md", "```sh\n"+mapped+"bin/kvstore get --addr 127.0.0.1:8090 color   # => blue\nbin/replicator --log-level debug slave --data d &  # a comment\n```\n")
	d.Blocks[0].Text += "\nbin/replicator --config x.hcl master &"
	s := Script(d, []Server{{Program: "replicator", Command: "master"}, {Program: "replicator", Command: "slave"}}, []string{"REPLICATOR_MASTER_LISTEN"})
	for _, w := range []string{
		"__docs_fail 'x.md:2: a server command must end with & (pasted into a shell, it would block): bin/replicator master --listen 127.0.0.1:40001",
		"bin/replicator put --api http://127.0.0.1:40001 x\n",
		"__docs_out=$(bin/kvstore get --addr 127.0.0.1:8090 color)\n__docs_expect 'blue' \"$__docs_out\"",
		"bin/replicator --log-level debug slave --data d &\n__docs_started $!\n",
		"env -u REPLICATOR_MASTER_LISTEN bin/replicator --config x.hcl master &\n",
	} {
		if !strings.Contains(s, w) {
			t.Errorf("script lacks %q:\n%s", w, s)
		}
	}
}
