package config

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// secProgram has the value kinds the security options use: files, a CSV
// list and an extra environment variable.
func secProgram(cert *string, allow *[]string) *Program {
	return &Program{
		Name: "prog", ConfigOption: "config",
		Env: []string{"REPLICATOR_API_TOKEN"},
		Global: []*Option{
			{Name: "config", Meta: "FILE", Value: String(new(string), true)},
		},
		Commands: []*Command{{Name: "master", Options: []*Option{
			{Name: "tls-cert", Meta: "FILE", Value: File(cert, true)},
			{Name: "ha-allow", Meta: "LIST", Value: CSV(allow, func(s string) error {
				if net.ParseIP(s) == nil {
					return errors.New("not an IP")
				}
				return nil
			})},
		}}},
	}
}

func TestFileAndCSVValues(t *testing.T) {
	dir := t.TempDir()
	cert := filepath.Join(dir, "cert.pem")
	if err := os.WriteFile(cert, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	var c string
	var allow []string
	p := secProgram(&c, &allow)

	// Flags: a comma-separated list, repeated.
	if _, err := p.Parse([]string{"master", "--tls-cert", cert, "--ha-allow", "10.0.0.1, 10.0.0.2", "--ha-allow=10.0.0.3"}, nil); err != nil {
		t.Fatal(err)
	}
	if c != cert || !reflect.DeepEqual(allow, []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}) {
		t.Fatalf("cert %q allow %q", c, allow)
	}
	// The environment, with REPLICATOR_API_TOKEN accepted and left alone.
	allow = nil
	if _, err := p.Parse([]string{"master"}, []string{"REPLICATOR_MASTER_HA_ALLOW=10.0.0.9,10.0.0.8", "REPLICATOR_API_TOKEN=abc"}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(allow, []string{"10.0.0.9", "10.0.0.8"}) {
		t.Fatalf("allow %q", allow)
	}
	// A file: an HCL list or a comma-separated string.
	for _, body := range []string{`master { ha_allow = ["10.0.0.4", "10.0.0.5"] }`, `master { ha_allow = "10.0.0.4,10.0.0.5" }`} {
		f := filepath.Join(dir, "c.hcl")
		os.WriteFile(f, []byte(body), 0o600)
		allow = nil
		if _, err := p.Parse([]string{"--config", f, "master"}, nil); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(allow, []string{"10.0.0.4", "10.0.0.5"}) {
			t.Fatalf("%s: allow %q", body, allow)
		}
	}
	// Refusals name the source.
	for _, tc := range []struct {
		args, env []string
		want      string
	}{
		{[]string{"master", "--tls-cert", filepath.Join(dir, "absent.pem")}, nil, "--tls-cert: file"},
		{[]string{"master", "--tls-cert", dir}, nil, "not a regular file"},
		{[]string{"master", "--ha-allow", "10.0.0.1,nope"}, nil, "--ha-allow: not an IP"},
		{[]string{"master"}, []string{"REPLICATOR_MASTER_HA_ALLOW=x"}, "REPLICATOR_MASTER_HA_ALLOW: not an IP"},
		{[]string{"master"}, []string{"REPLICATOR_API_TOKNE=x"}, "unknown environment variable"},
	} {
		_, err := p.Parse(tc.args, tc.env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q, %q) = %v, want %q", tc.args, tc.env, err, tc.want)
		}
	}
}
