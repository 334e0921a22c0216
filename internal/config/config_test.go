package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type testOpts struct {
	level   string
	plugins string
	cfg     string
	data    string
	listen  string
	seg     int64
	timeout time.Duration
	acks    int
	mode    string
	api     string
	props   []string
	json    bool
	peer    string
}

func testProgram(o *testOpts) *Program {
	return &Program{
		Name:         "prog",
		Synopsis:     "a test program",
		ConfigOption: "config",
		Global: []*Option{
			{Name: "config", Meta: "FILE", Help: "config file", Value: String(&o.cfg, true)},
			{Name: "log-level", Meta: "LEVEL", Help: "level", Default: "info", Value: Enum(&o.level, "debug", "info", "warn")},
			{Name: "plugins", Meta: "DIR", Help: "plugins", Value: Dir(&o.plugins, true)},
		},
		Commands: []*Command{
			{Name: "master", Synopsis: "run a master", Options: []*Option{
				{Name: "data", Meta: "DIR", Help: "data", Default: "./data/master", Value: String(&o.data, true)},
				{Name: "listen", Meta: "ADDR", Help: "listen", Default: "127.0.0.1:10911", Value: Addr(&o.listen, true)},
				{Name: "segment-size", Meta: "SIZE", Help: "segment", Default: "1GiB", Value: Size(&o.seg, 64<<10, 64<<30)},
				{Name: "slave-timeout", Meta: "DURATION", Help: "timeout", Default: "5s", Value: Duration(&o.timeout, time.Millisecond, time.Hour)},
				{Name: "sync-acks", Meta: "N", Help: "acks", Default: "1", Value: Int(&o.acks, 1, 64)},
				{Name: "replication", Meta: "MODE", Help: "mode", Default: "async", Value: Enum(&o.mode, "async", "sync")},
			}},
			{Name: "put", Synopsis: "put", MaxArgs: -1, Options: []*Option{
				{Name: "api", Meta: "URL", Help: "api", Default: "http://127.0.0.1:10911", Value: URL(&o.api, false)},
				{Name: "property", Meta: "K=V", Help: "property", Value: List(&o.props, func(s string) error {
					if !strings.Contains(s, "=") {
						return errors.New("want k=v")
					}
					return nil
				})},
				{Name: "json", Help: "json", Value: Bool(&o.json)},
			}},
			{Name: "slave", Synopsis: "slave", Options: []*Option{
				{Name: "master", Meta: "ADDR", Help: "peer", Required: true, Value: Addr(&o.peer, false)},
			}},
			{Name: "version", Synopsis: "version"},
		},
	}
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "replicator.hcl")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigDefaults(t *testing.T) {
	var o testOpts
	res, err := testProgram(&o).Parse([]string{"master"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Command.Name != "master" || o.data != "./data/master" || o.listen != "127.0.0.1:10911" ||
		o.seg != 1<<30 || o.timeout != 5*time.Second || o.acks != 1 || o.mode != "async" || o.level != "info" {
		t.Fatalf("defaults not applied: %+v", o)
	}
	if res.Sources["segment-size"] != SourceDefault {
		t.Fatalf("source = %v", res.Sources["segment-size"])
	}
}

func TestConfigPrecedence(t *testing.T) {
	file := writeFile(t, `
log_level = "warn"
master {
  segment_size  = "64MiB"
  slave_timeout = "2s"
  sync_acks     = 2
  replication   = "sync"
}
put {
  property = ["a=1", "b=2"]
  json     = true
}
`)
	tests := []struct {
		name  string
		args  []string
		env   []string
		check func(t *testing.T, o *testOpts, res *Result)
	}{
		{"file", []string{"--config", file, "master"}, nil, func(t *testing.T, o *testOpts, res *Result) {
			if o.seg != 64<<20 || o.timeout != 2*time.Second || o.acks != 2 || o.mode != "sync" || o.level != "warn" {
				t.Fatalf("file values not applied: %+v", o)
			}
			if res.Sources["segment-size"] != SourceFile {
				t.Fatalf("source = %v", res.Sources["segment-size"])
			}
		}},
		{"config from env", []string{"master"}, []string{"REPLICATOR_CONFIG=" + file}, func(t *testing.T, o *testOpts, res *Result) {
			if o.seg != 64<<20 {
				t.Fatalf("file named by env not read: %+v", o)
			}
		}},
		{"env over file", []string{"--config", file, "master"}, []string{"REPLICATOR_MASTER_SEGMENT_SIZE=128MiB", "REPLICATOR_LOG_LEVEL=debug"}, func(t *testing.T, o *testOpts, res *Result) {
			if o.seg != 128<<20 || o.level != "debug" || o.timeout != 2*time.Second {
				t.Fatalf("env did not win: %+v", o)
			}
			if res.Sources["segment-size"] != SourceEnv {
				t.Fatalf("source = %v", res.Sources["segment-size"])
			}
		}},
		{"flag over env", []string{"--config", file, "--log-level=info", "master", "--segment-size", "256MiB"}, []string{"REPLICATOR_MASTER_SEGMENT_SIZE=128MiB", "REPLICATOR_LOG_LEVEL=debug"}, func(t *testing.T, o *testOpts, res *Result) {
			if o.seg != 256<<20 || o.level != "info" {
				t.Fatalf("flag did not win: %+v", o)
			}
			if res.Sources["segment-size"] != SourceFlag {
				t.Fatalf("source = %v", res.Sources["segment-size"])
			}
		}},
		{"global flag after command", []string{"master", "--log-level", "warn", "-segment-size=1MiB"}, nil, func(t *testing.T, o *testOpts, res *Result) {
			if o.level != "warn" || o.seg != 1<<20 {
				t.Fatalf("got %+v", o)
			}
		}},
		{"list from file", []string{"--config", file, "put"}, nil, func(t *testing.T, o *testOpts, res *Result) {
			if strings.Join(o.props, ",") != "a=1,b=2" || !o.json {
				t.Fatalf("got %+v", o)
			}
		}},
		{"list env replaces file", []string{"--config", file, "put"}, []string{"REPLICATOR_PUT_PROPERTY=c=3, d=4"}, func(t *testing.T, o *testOpts, res *Result) {
			if strings.Join(o.props, ",") != "c=3,d=4" {
				t.Fatalf("got %q", o.props)
			}
		}},
		{"list flags replace env and repeat", []string{"put", "--property", "e=5", "--property=f=6", "--json=false", "m1", "m2"}, []string{"REPLICATOR_PUT_PROPERTY=c=3", "REPLICATOR_PUT_JSON=true"}, func(t *testing.T, o *testOpts, res *Result) {
			if strings.Join(o.props, ",") != "e=5,f=6" || o.json {
				t.Fatalf("got %+v", o)
			}
			if strings.Join(res.Args, ",") != "m1,m2" {
				t.Fatalf("args = %q", res.Args)
			}
		}},
		{"double dash", []string{"put", "--", "--not-a-flag"}, nil, func(t *testing.T, o *testOpts, res *Result) {
			if len(res.Args) != 1 || res.Args[0] != "--not-a-flag" {
				t.Fatalf("args = %q", res.Args)
			}
		}},
		{"url normalised", []string{"put", "--api", "localhost:8080/"}, nil, func(t *testing.T, o *testOpts, res *Result) {
			if o.api != "http://localhost:8080" {
				t.Fatalf("api = %q", o.api)
			}
		}},
		{"other env vars ignored", []string{"master"}, []string{"HOME=/root", "PATH=/bin", "REPLICATOR_SLAVE_MASTER=1.2.3.4:5"}, func(t *testing.T, o *testOpts, res *Result) {}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var o testOpts
			res, err := testProgram(&o).Parse(tc.args, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, &o, res)
		})
	}
}

func TestConfigErrors(t *testing.T) {
	notDir := writeFile(t, "")
	tests := []struct {
		name string
		args []string
		env  []string
		file string
		want []string // substrings of the error
	}{
		{"unknown command", []string{"mastr"}, nil, "", []string{"mastr", "unknown command", `"master"`}},
		{"unknown flag", []string{"master", "--segmnt-size", "1"}, nil, "", []string{"--segmnt-size", "unknown flag", `"--segment-size"`}},
		{"unknown global flag", []string{"--lg-level", "x", "master"}, nil, "", []string{"--lg-level", "unknown global flag"}},
		{"missing value", []string{"master", "--segment-size"}, nil, "", []string{"--segment-size", "missing value"}},
		{"bad size flag", []string{"master", "--segment-size", "1GX"}, nil, "", []string{"--segment-size", "invalid size"}},
		{"size too small", []string{"master", "--segment-size", "1KiB"}, nil, "", []string{"--segment-size", "out of range"}},
		{"bad duration", []string{"master", "--slave-timeout", "5"}, nil, "", []string{"--slave-timeout", "invalid duration"}},
		{"bad addr", []string{"master", "--listen", "localhost"}, nil, "", []string{"--listen", "invalid address"}},
		{"bad port", []string{"master", "--listen", "127.0.0.1:70000"}, nil, "", []string{"--listen", "invalid port"}},
		{"bad host", []string{"master", "--listen", "bad_host!:1"}, nil, "", []string{"--listen", "invalid host name"}},
		{"dial port 0", []string{"slave", "--master", "127.0.0.1:0"}, nil, "", []string{"--master", "port other than 0"}},
		{"required", []string{"slave"}, nil, "", []string{"--master", "REPLICATOR_SLAVE_MASTER", "required"}},
		{"bad int", []string{"master", "--sync-acks", "0"}, nil, "", []string{"--sync-acks", "out of range"}},
		{"bad enum", []string{"master", "--replication", "semi"}, nil, "", []string{"--replication", "async, sync"}},
		{"bad url", []string{"put", "--api", "ftp://x:1"}, nil, "", []string{"--api", "invalid URL"}},
		{"bad list item", []string{"put", "--property", "novalue"}, nil, "", []string{"--property", "want k=v"}},
		{"bad bool", []string{"put", "--json=maybe"}, nil, "", []string{"--json", "invalid boolean"}},
		{"plugins not a dir", []string{"--plugins", notDir, "master"}, nil, "", []string{"--plugins", "not a directory"}},
		{"plugins missing", []string{"--plugins", "/does/not/exist", "master"}, nil, "", []string{"--plugins", "does not exist"}},
		{"args not taken", []string{"master", "extra"}, nil, "", []string{"extra", "unexpected argument"}},
		{"unknown env", []string{"master"}, []string{"REPLICATOR_MASTER_SEGMNT_SIZE=1GiB"}, "", []string{"REPLICATOR_MASTER_SEGMNT_SIZE", "unknown environment variable", "REPLICATOR_MASTER_SEGMENT_SIZE"}},
		{"bad env value", []string{"master"}, []string{"REPLICATOR_MASTER_SEGMENT_SIZE=big"}, "", []string{"REPLICATOR_MASTER_SEGMENT_SIZE", "invalid size"}},
		{"bad env global", []string{"master"}, []string{"REPLICATOR_LOG_LEVEL=loud"}, "", []string{"REPLICATOR_LOG_LEVEL", "invalid value"}},
		{"missing file", []string{"--config", "/does/not/exist.hcl", "master"}, nil, "", []string{"--config", "no such file"}},
		{"file unknown key", []string{"master"}, nil, "master {\n  segmnt_size = \"1GiB\"\n}\n", []string{"replicator.hcl:2,3", "master.segmnt_size", "unknown key", `"segment_size"`}},
		{"file unknown global", []string{"master"}, nil, "loglevel = \"info\"\n", []string{"replicator.hcl:1,1", "loglevel", "unknown key", `"log_level"`}},
		{"file bad value", []string{"master"}, nil, "master {\n  segment_size = \"huge\"\n}\n", []string{"replicator.hcl:2,3", "master.segment_size", "invalid size"}},
		{"file bad value in other block", []string{"master"}, nil, "put {\n  api = \"ftp://x\"\n}\n", []string{"replicator.hcl:2,3", "put.api", "invalid URL"}},
		{"file unknown block", []string{"master"}, nil, "mastr {\n}\n", []string{"replicator.hcl:1,1", "mastr", "unknown block", `"master"`}},
		{"file block for command without options", []string{"master"}, nil, "version {\n}\n", []string{"version", "unknown block"}},
		{"file labelled block", []string{"master"}, nil, "master \"x\" {\n}\n", []string{"master", "no label"}},
		{"file duplicate block", []string{"master"}, nil, "master {\n}\nmaster {\n}\n", []string{"master", "twice"}},
		{"file syntax", []string{"master"}, nil, "master {\n  segment_size = \n}\n", []string{"replicator.hcl:"}},
		{"file variable", []string{"master"}, nil, "master {\n  data = var.x\n}\n", []string{"master.data", "Variables not allowed"}},
		{"file wrong type", []string{"master"}, nil, "master {\n  data = {a = 1}\n}\n", []string{"master.data", "want a string"}},
		{"file config key", []string{"master"}, nil, "config = \"x\"\n", []string{"config", "unknown key"}},
		{"file nested block", []string{"master"}, nil, "master {\n  tls {\n  }\n}\n", []string{"master.tls", "unknown block"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = append([]string{"--config", writeFile(t, tc.file)}, args...)
			}
			var o testOpts
			_, err := testProgram(&o).Parse(args, tc.env)
			if err == nil {
				t.Fatal("no error")
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *config.Error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestConfigHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"master", "--help"}, {"help", "master"}, {"--help", "master"}, {"master", "-h", "--segment-size", "bad"}} {
		var o testOpts
		p := testProgram(&o)
		res, err := p.Parse(args, nil)
		if !errors.Is(err, ErrHelp) {
			t.Fatalf("%q: err = %v, want ErrHelp", args, err)
		}
		var buf bytes.Buffer
		p.Usage(&buf, res.Command)
		out := buf.String()
		if res.Command == nil {
			for _, w := range []string{"Usage:", "master", "put", "--log-level LEVEL", "REPLICATOR_LOG_LEVEL"} {
				if !strings.Contains(out, w) {
					t.Errorf("%q: help lacks %q:\n%s", args, w, out)
				}
			}
		} else {
			for _, w := range []string{"Usage: prog [global flags] master [flags]", "--segment-size SIZE", "(default 1GiB)", "[$REPLICATOR_MASTER_SEGMENT_SIZE]"} {
				if !strings.Contains(out, w) {
					t.Errorf("%q: help lacks %q:\n%s", args, w, out)
				}
			}
		}
	}
}

func TestConfigValues(t *testing.T) {
	sizes := map[string]int64{"4096": 4096, "64KiB": 64 << 10, "1GiB": 1 << 30, "1gib": 1 << 30, "16MB": 16e6, "2 MiB": 2 << 20, "7B": 7, "1TiB": 1 << 40}
	for s, want := range sizes {
		got, err := ParseSize(s)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "-1", "1.5GiB", "GiB", "1GX", "99999999999TiB", "0x10"} {
		if _, err := ParseSize(s); err == nil {
			t.Errorf("ParseSize(%q) accepted", s)
		}
	}
	for n, want := range map[int64]string{1 << 30: "1GiB", 64 << 10: "64KiB", 1000: "1000", 3 << 20: "3MiB", 0: "0"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
	addrs := []struct {
		s      string
		listen bool
		ok     bool
	}{
		{"127.0.0.1:10911", false, true}, {":10911", true, true}, {":10911", false, false},
		{"[::1]:1", false, true}, {"example.com:80", false, true}, {"127.0.0.1:0", true, true},
		{"127.0.0.1", true, false}, {"127.0.0.1:x", true, false}, {"a b:1", false, false},
	}
	for _, a := range addrs {
		if err := CheckAddr(a.s, a.listen); (err == nil) != a.ok {
			t.Errorf("CheckAddr(%q, %v) = %v, want ok=%v", a.s, a.listen, err, a.ok)
		}
	}
	urls := map[string]string{
		"http://127.0.0.1:10911":  "http://127.0.0.1:10911",
		"127.0.0.1:10911":         "http://127.0.0.1:10911",
		"https://example.com/x/":  "https://example.com/x",
		"http://localhost:1/api/": "http://localhost:1/api",
	}
	for in, want := range urls {
		if got, err := NormalizeURL(in); err != nil || got != want {
			t.Errorf("NormalizeURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "ftp://x:1", "http://", "http://x:1/?q=1", "http://u:p@x:1", "http://x:0", "http://x:99999"} {
		if got, err := NormalizeURL(in); err == nil {
			t.Errorf("NormalizeURL(%q) = %q, accepted", in, got)
		}
	}
}
