package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConfigProgram parses the real command line: defaults, the file, the
// environment and flags, in that order of precedence.
func TestConfigProgram(t *testing.T) {
	file := filepath.Join(t.TempDir(), "replicator.hcl")
	os.WriteFile(file, []byte(`
log_format = "json"
master {
  data          = "/srv/m"
  replication   = "sync"
  slave_timeout = "3s"
  segment_size  = "64MiB"
  sync_acks     = 2
  max_lag       = "4MiB"
}
slave {
  master            = "10.0.0.1:10912"
  metadata_interval = "30s"
}
put {
  property = ["a=1"]
}
`), 0o644)

	var o options
	res, err := program(&o).Parse([]string{"--config", file, "master", "--segment-size", "128MiB"},
		[]string{"REPLICATOR_MASTER_SLAVE_TIMEOUT=4s", "REPLICATOR_MASTER_LISTEN=127.0.0.1:9000"})
	if err != nil {
		t.Fatal(err)
	}
	m := o.master
	if res.Command.Name != "master" || m.Data != "/srv/m" || m.Replication != "sync" || m.SlaveTimeout != 4*time.Second ||
		m.SegmentSize != 128<<20 || m.SyncAcks != 2 || m.MaxLag != 4<<20 || m.Listen != "127.0.0.1:9000" || m.HAListen != defaultHAListen ||
		m.Flush != "async" || m.MaxMessageSize != 4<<20 || o.global.LogFormat != "json" || o.global.LogLevel != "info" {
		t.Fatalf("master options %+v, global %+v", m, o.global)
	}

	o = options{}
	if _, err := program(&o).Parse([]string{"--config", file, "slave"}, nil); err != nil {
		t.Fatal(err)
	}
	if s := o.slave; s.Master != "10.0.0.1:10912" || s.MetadataInterval != 30*time.Second || s.Data != "./data/slave" ||
		s.ReconnectDelay != 5*time.Second || s.MasterAPI != "" {
		t.Fatalf("slave options %+v", s)
	}

	o = options{}
	res, err = program(&o).Parse([]string{"--config", file, "put", "--property", "b=2", "m1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.put.Properties, ",") != "b=2" || o.put.API != defaultAPIURL || o.put.Topic != "TopicTest" || len(res.Args) != 1 {
		t.Fatalf("put options %+v args %q", o.put, res.Args)
	}
}

func TestConfigNodeDerived(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:10912": "http://127.0.0.1:10911",
		"[::1]:20000":     "http://[::1]:19999",
		"host:1":          "",
		"nonsense":        "",
	} {
		if got := defaultMasterAPI(in); got != want {
			t.Errorf("defaultMasterAPI(%q) = %q, want %q", in, got, want)
		}
	}
	// The default --max-message-size shrinks to fit a small segment; an
	// explicit one that does not fit is refused.
	var o options
	res, err := program(&o).Parse([]string{"master", "--segment-size", "1MiB", "--max-lag", "2MiB", "--pprof"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{opts: &o, sources: res.Sources, log: newLogger(o.global, os.Stderr)}
	cfg, err := nodeConfig(e, "master", &o.master)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxMessageSize != 512<<10 || cfg.MaxLag != 2<<20 || !cfg.Profiling {
		t.Fatalf("max message size %d, max lag %d, profiling %v", cfg.MaxMessageSize, cfg.MaxLag, cfg.Profiling)
	}
	o = options{}
	res, err = program(&o).Parse([]string{"master", "--segment-size", "1MiB", "--max-message-size", "1MiB"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e = &env{opts: &o, sources: res.Sources, log: newLogger(o.global, os.Stderr)}
	if _, err := nodeConfig(e, "master", &o.master); err == nil || !strings.Contains(err.Error(), "--max-message-size") {
		t.Fatalf("nodeConfig = %v", err)
	}
}
