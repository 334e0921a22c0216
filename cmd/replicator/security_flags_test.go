package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replicatorhq/replicator/internal/node/testpki"
)

// TestSecurityFlags parses the security options from flags, the
// environment and a file, and refuses inconsistent combinations before
// anything starts, naming the flags.
func TestSecurityFlags(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "flags CA")
	caFile := ca.WriteCA(t, dir, "ca.pem")
	cert, key := ca.Server(t, "node").Write(t, dir, "node")
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("0123456789abcdef0123\n"), 0o600)
	hcl := filepath.Join(dir, "r.hcl")
	os.WriteFile(hcl, []byte(`master {
  ha_allow    = ["10.0.0.2", "10.0.1.0/24"]
  ha_allow_cn = "slave-1,slave-2"
  tls_cert    = "`+cert+`"
}
`), 0o600)

	var o options
	if _, err := program(&o).Parse([]string{"--config", hcl, "master", "--tls-key", key, "--ha-max-conns", "10"},
		[]string{"REPLICATOR_MASTER_API_TOKEN_FILE=" + tok, "REPLICATOR_API_TOKEN=ignored-by-the-parser"}); err != nil {
		t.Fatal(err)
	}
	sec := o.master.sec
	if strings.Join(sec.HAAllow, " ") != "10.0.0.2 10.0.1.0/24" || strings.Join(sec.HAAllowCN, " ") != "slave-1 slave-2" ||
		sec.TLSCert != cert || sec.TLSKey != key || sec.APITokenFile != tok || sec.HAMaxConns != 10 || sec.HAMaxConnsPerIP != 64 {
		t.Fatalf("master security options %+v", sec)
	}

	// Unusable values found after parsing (TLS files, tokens, conflicting
	// options) exit 2 like parse errors: invalid values are bad usage.
	for _, tc := range []struct {
		args []string
		env  []string
		code int
		want string
	}{
		{[]string{"master", "--tls-client-ca", caFile}, nil, exitUsage, "--tls-client-ca needs --tls-cert"},
		{[]string{"master", "--tls-cert", cert}, nil, exitUsage, "both the certificate and the key"},
		{[]string{"master", "--ha-tls-client-ca", caFile}, nil, exitUsage, "--ha-tls-client-ca needs --ha-tls-cert"},
		{[]string{"master", "--ha-allow-cn", "x"}, nil, exitUsage, "--ha-allow-cn needs --ha-tls-client-ca"},
		{[]string{"master", "--ha-allow", "10.0.0.300"}, nil, exitUsage, "--ha-allow"},
		{[]string{"master", "--tls-cert", caFile, "--tls-key", caFile}, nil, exitUsage, "TLS files"},
		{[]string{"master", "--api-token-file", filepath.Join(dir, "absent")}, nil, exitUsage, "does not exist"},
		{[]string{"master"}, []string{"REPLICATOR_API_TOKEN=short"}, exitUsage, "REPLICATOR_API_TOKEN: bad API token"},
		{[]string{"slave", "--ha-tls-cert", cert, "--ha-tls-key", key}, nil, exitUsage, "need --ha-tls-ca"},
		{[]string{"slave", "--master-api-cert", cert}, nil, exitUsage, "both the certificate and the key"},
		{[]string{"status", "--ca", caFile, "--api", "http://127.0.0.1:1"}, nil, exitUsage, "need an https:// URL"},
		{[]string{"put", "--cert", cert, "--api", "https://127.0.0.1:1", "m"}, nil, exitUsage, "both the certificate and the key"},
	} {
		var out, errb bytes.Buffer
		args := append([]string{"--log-level", "off"}, tc.args...)
		args = append(args[:3:3], append([]string{"--data", filepath.Join(dir, "data")}, args[3:]...)...)
		if tc.args[0] != "master" && tc.args[0] != "slave" {
			args = append([]string{"--log-level", "off"}, tc.args...)
		}
		code := run(args, tc.env, strings.NewReader(""), &out, &errb)
		if code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}
