package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/node"
	"github.com/replicatorhq/replicator/internal/node/testpki"
)

// TestE2ESecure runs a master and a slave as processes with everything on:
// the master's API over mutual TLS with a bearer token, the HA port over
// mutual TLS with an address allow list and an allowed certificate name,
// the slave's API over TLS with the token, and the slave's metadata syncer
// calling the master's API with its client certificate and token. The CLI
// talks to both with --ca/--cert/--key and --token-file or
// REPLICATOR_API_TOKEN.
func TestE2ESecure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pkiDir := filepath.Join(dir, "pki")
	os.Mkdir(pkiDir, 0o700)
	ca := testpki.NewCA(t, "replicator e2e CA")
	caFile := ca.WriteCA(t, pkiDir, "ca.pem")
	srvCert, srvKey := ca.Server(t, "node").Write(t, pkiDir, "node")
	cliCert, cliKey := ca.Client(t, "slave-1").Write(t, pkiDir, "slave-1")
	const token = "e2e-token-6b1f0c7d9a8e4f21"
	tokFile := filepath.Join(pkiDir, "token")
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	pp := ports(t, 3)
	mAPI, mHA, sAPI := "https://"+pp[0], pp[1], "https://"+pp[2]
	master := start(t, "master", "--log-level", "info", "master", "--data", filepath.Join(dir, "m"),
		"--listen", pp[0], "--ha-listen", mHA, "--segment-size", testSegment,
		"--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-ca", caFile, "--api-token-file", tokFile,
		"--ha-tls-cert", srvCert, "--ha-tls-key", srvKey, "--ha-tls-client-ca", caFile,
		"--ha-allow", "127.0.0.1,::1", "--ha-allow-cn", "slave-1")
	slave := start(t, "slave", "--log-level", "info", "slave", "--data", filepath.Join(dir, "s"),
		"--listen", pp[2], "--master", mHA, "--master-api", mAPI, "--segment-size", testSegment,
		"--reconnect-delay", "100ms", "--metadata-interval", "200ms",
		"--tls-cert", srvCert, "--tls-key", srvKey, "--api-token-file", tokFile,
		"--ha-tls-ca", caFile, "--ha-tls-cert", cliCert, "--ha-tls-key", cliKey,
		"--master-api-ca", caFile, "--master-api-cert", cliCert, "--master-api-key", cliKey)

	tlsCfg, err := node.ClientTLS(caFile, cliCert, cliKey, "")
	if err != nil {
		t.Fatal(err)
	}
	hc := node.APIClient(tlsCfg, token, 10*time.Second)
	defer hc.CloseIdleConnections()
	bare := node.APIClient(tlsCfg, "", 10*time.Second) // a certificate, no token
	defer bare.CloseIdleConnections()
	get := func(c *http.Client, url string, v any) (int, error) {
		resp, err := c.Get(url)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if v != nil && resp.StatusCode == 200 {
			if err := json.Unmarshal(b, v); err != nil {
				return 0, err
			}
		}
		return resp.StatusCode, nil
	}
	for _, p := range []*proc{master, slave} {
		url := mAPI
		if p == slave {
			url = sAPI
		}
		eventually(t, p.name+" ready", func() error {
			select {
			case <-p.done:
				t.Fatalf("%s exited: %v", p.name, p.err)
			default:
			}
			// Probes need no token (the master still wants a certificate).
			if code, err := get(bare, url+"/readyz", nil); err != nil || code != 200 {
				return fmt.Errorf("readyz %d %v", code, err)
			}
			return nil
		})
	}

	// The API refuses a request without the token, on both nodes.
	for _, url := range []string{mAPI, sAPI} {
		if code, err := get(bare, url+"/v1/status", nil); err != nil || code != 401 {
			t.Fatalf("%s/v1/status without a token: %d %v", url, code, err)
		}
	}
	// put with --token-file and a client certificate.
	code, out, errOut := runCLI(t, "", "put", "--api", mAPI, "--ca", caFile, "--cert", cliCert, "--cert-key", cliKey,
		"--token-file", tokFile, "--topic", "Secure", "hello", "world")
	if code != exitOK || strings.Count(out, "PUT_OK") != 2 {
		t.Fatalf("put: exit %d\n%s%s", code, out, errOut)
	}
	// Without the token: 401, exit 1.
	code, _, errOut = runCLI(t, "", "put", "--api", mAPI, "--ca", caFile, "--cert", cliCert, "--cert-key", cliKey, "nope")
	if code != exitError || !strings.Contains(errOut, "401") {
		t.Fatalf("put without a token: exit %d, %s", code, errOut)
	}
	// Without the client certificate: a TLS error, exit 1.
	code, _, errOut = runCLI(t, "", "put", "--api", mAPI, "--ca", caFile, "--token-file", tokFile, "nope")
	if code != exitError || !strings.Contains(errOut, "certificate required") {
		t.Fatalf("put without a certificate: exit %d, %s", code, errOut)
	}

	// The slave replicates over mutual TLS; status and tail with the token
	// from the environment.
	env := []string{"REPLICATOR_API_TOKEN=" + token}
	eventually(t, "slave caught up", func() error {
		var ms, ss api.Status
		if _, err := get(hc, mAPI+"/v1/status", &ms); err != nil {
			return err
		}
		if _, err := get(hc, sAPI+"/v1/status", &ss); err != nil {
			return err
		}
		if ms.MaxOffset == 0 || ms.MaxOffset != ss.MaxOffset {
			return fmt.Errorf("master %d, slave %d", ms.MaxOffset, ss.MaxOffset)
		}
		return nil
	})
	code, out, errOut = runCLIEnv(t, env, "", "tail", "--api", sAPI, "--ca", caFile)
	if code != exitOK || !strings.Contains(out, "body=hello") || !strings.Contains(out, "body=world") {
		t.Fatalf("tail: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCLIEnv(t, env, "", "status", "--api", sAPI, "--ca", caFile)
	if code != exitOK || !strings.Contains(out, "connected") {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}

	// The metadata syncer reaches the master's API with its certificate
	// and token.
	doc := `{"topicConfigTable":{"Secure":{"topicName":"Secure","readQueueNums":4,"writeQueueNums":4,"perm":6}}}`
	req, _ := http.NewRequest("PUT", mAPI+"/v1/metadata/topics.json", strings.NewReader(doc))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("metadata put: %d", resp.StatusCode)
	}
	eventually(t, "metadata synced to the slave", func() error {
		resp, err := hc.Get(sAPI + "/v1/metadata/topics.json")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), `"Secure"`) {
			return fmt.Errorf("%d %s", resp.StatusCode, b)
		}
		return nil
	})

	slave.stop()
	master.stop()
	mlog, _ := os.ReadFile(master.log)
	for _, bad := range []string{"TLS handshake failed", "refusing HA connection", "metadata sync failed"} {
		if strings.Contains(string(mlog), bad) {
			t.Errorf("master log has %q", bad)
		}
	}
	slog, _ := os.ReadFile(slave.log)
	// A status 401 or a certificate error; not the digits of a temporary
	// directory's name or of a port.
	if regexp.MustCompile(`\b401\b|certificate`).Match(slog) {
		t.Errorf("slave log shows an auth problem:\n%s", slog)
	}
}
