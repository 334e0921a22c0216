package node

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/node/testpki"
	"github.com/replicatorhq/replicator/internal/pluginhost"
	"github.com/replicatorhq/replicator/transport"
)

// pkiFiles writes a CA, a master certificate and client certificates to a
// test directory, as an operator would have them.
type pkiFiles struct {
	ca                        *testpki.CA
	caFile                    string
	srvCert, srvKey           string
	slaveCert, slaveKey       string // CN "slave-1"
	otherCA                   *testpki.CA
	otherCAFile               string
	strangerCert, strangerKey string // signed by otherCA
}

func newPKIFiles(t *testing.T) *pkiFiles {
	t.Helper()
	dir := t.TempDir()
	p := &pkiFiles{ca: testpki.NewCA(t, "replicator test CA"), otherCA: testpki.NewCA(t, "another CA")}
	p.caFile = p.ca.WriteCA(t, dir, "ca.pem")
	p.otherCAFile = p.otherCA.WriteCA(t, dir, "other-ca.pem")
	p.srvCert, p.srvKey = p.ca.Server(t, "master").Write(t, dir, "master")
	p.slaveCert, p.slaveKey = p.ca.Client(t, "slave-1").Write(t, dir, "slave")
	p.strangerCert, p.strangerKey = p.otherCA.Client(t, "slave-1").Write(t, dir, "stranger")
	return p
}

// mustTLS returns a function that fails t on an error and returns the
// configuration: mustTLS(t)(ServerTLS(...)).
func mustTLS(t *testing.T) func(*tls.Config, error) *tls.Config {
	return func(cfg *tls.Config, err error) *tls.Config {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
}

// putN stores n messages through the master's API with hc.
func putN(t *testing.T, hc *http.Client, url string, n int, header http.Header) {
	t.Helper()
	for i := range n {
		req, _ := http.NewRequest("POST", url+"/v1/topics/Secure/messages", strings.NewReader(fmt.Sprint("secret message ", i)))
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("put: %d %s", resp.StatusCode, b)
		}
	}
}

// TestHAMutualTLS replicates over mutual TLS on the HA port, and checks that
// a slave without a client certificate, one with a certificate from another
// CA, one not in --ha-allow-cn, and one that does not trust the master's CA
// are all refused while the good slave keeps replicating.
func TestHAMutualTLS(t *testing.T) {
	p := newPKIFiles(t)
	var mlogs logBuf
	dir := t.TempDir()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	base := Config{Listen: "127.0.0.1:0", SegmentSize: 1 << 20, Registry: pluginhost.Builtin(), Version: "test"}

	mc := base
	mc.Role, mc.DataDir, mc.HAListen, mc.Logger = core.AsyncMaster, filepath.Join(dir, "m"), "127.0.0.1:0", mlogs.logger()
	mc.HA.ServerTLS = mustTLS(t)(ServerTLS(p.srvCert, p.srvKey, p.caFile))
	mc.HA.AllowClientNames = []string{"slave-1"}
	m := startNode(t, mc)
	ha := m.n.master.Addr()

	slave := func(name string, tlsCfg *tls.Config) (*started, *logBuf) {
		var logs logBuf
		sc := base
		sc.Role, sc.DataDir, sc.MasterHA, sc.Logger = core.Slave, filepath.Join(dir, name), ha, logs.logger()
		sc.HA.ClientTLS, sc.ReconnectDelay = tlsCfg, 20*time.Millisecond
		return startNode(t, sc), &logs
	}
	good, _ := slave("good", mustTLS(t)(ClientTLS(p.caFile, p.slaveCert, p.slaveKey, "")))
	putN(t, hc, m.n.URL(), 30, nil)
	var mst api.Status
	eventually(t, "good slave caught up", 20*time.Second, func() error {
		mst = nodeStatus(t, hc, m.n.URL())
		if got := nodeStatus(t, hc, good.n.URL()).MaxOffset; got != mst.MaxOffset {
			return fmt.Errorf("slave %d, master %d", got, mst.MaxOffset)
		}
		return nil
	})

	otherNameCert, otherNameKey := p.ca.Client(t, "slave-9").Write(t, t.TempDir(), "slave-9")
	for _, tc := range []struct {
		name     string
		cfg      *tls.Config
		slaveErr string // in the refused slave's last error
	}{
		{"no client certificate", mustTLS(t)(ClientTLS(p.caFile, "", "", "")), "certificate"},
		{"client certificate from another CA", mustTLS(t)(ClientTLS(p.caFile, p.strangerCert, p.strangerKey, "")), "certificate"},
		{"client name not allowed", mustTLS(t)(ClientTLS(p.caFile, otherNameCert, otherNameKey, "")), "certificate"},
		{"master from an unknown CA", mustTLS(t)(ClientTLS(p.otherCAFile, p.slaveCert, p.slaveKey, "")), "unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(mlogs.lines("TLS handshake failed"))
			s, _ := slave(strings.ReplaceAll(tc.name, " ", "-"), tc.cfg)
			eventually(t, "refused", 20*time.Second, func() error {
				st := nodeStatus(t, hc, s.n.URL())
				if st.Master == nil || !strings.Contains(st.Master.LastError, tc.slaveErr) {
					return fmt.Errorf("slave status %+v", st.Master)
				}
				if len(mlogs.lines("TLS handshake failed")) == before {
					return errors.New("the master logged no handshake failure")
				}
				return nil
			})
			if st := nodeStatus(t, hc, s.n.URL()); st.MaxOffset != 0 {
				t.Fatalf("a refused slave got %d bytes", st.MaxOffset)
			}
			if err := s.stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
	// Only the good slave was ever a slave of the master.
	if n := len(nodeStatus(t, hc, m.n.URL()).Slaves); n != 1 {
		t.Fatalf("master has %d slaves", n)
	}
	if n := len(mlogs.lines("slave connected")); n != 1 {
		t.Fatalf("%d slave connections reached the HA protocol, want 1", n)
	}
	good.stop()
	m.stop()
	compareSegments(t, mc.DataDir, filepath.Join(dir, "good"), mst.MaxOffset)
}

// TestHAAllowList lets only 127.0.0.1 connect: a peer on 127.0.0.2 is
// closed at accept, the slave on 127.0.0.1 replicates.
func TestHAAllowList(t *testing.T) {
	var mlogs logBuf
	dir := t.TempDir()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	m := startNode(t, Config{
		Role: core.AsyncMaster, DataDir: filepath.Join(dir, "m"), Listen: "127.0.0.1:0", HAListen: "127.0.0.1:0",
		SegmentSize: 1 << 20, Registry: pluginhost.Builtin(), Logger: mlogs.logger(),
		HA: transport.Security{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}},
	})
	ha := m.n.master.Addr()
	c, err := dialFrom(t, "127.0.0.2", ha)
	if err == nil {
		c.Write(report(0))
		if err := waitClosed(c, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	s := startNode(t, Config{
		Role: core.Slave, DataDir: filepath.Join(dir, "s"), Listen: "127.0.0.1:0", MasterHA: ha,
		SegmentSize: 1 << 20, Registry: pluginhost.Builtin(),
	})
	putN(t, hc, m.n.URL(), 5, nil)
	eventually(t, "slave caught up", 20*time.Second, func() error {
		mm, sm := nodeStatus(t, hc, m.n.URL()).MaxOffset, nodeStatus(t, hc, s.n.URL()).MaxOffset
		if mm != sm {
			return fmt.Errorf("master %d slave %d", mm, sm)
		}
		return nil
	})
	eventually(t, "refusal logged", 5*time.Second, func() error {
		if n := len(mlogs.lines("refusing HA connection", "127.0.0.2", "not_allowed")); n != 1 {
			return fmt.Errorf("%d refusal lines:\n%s", n, mlogs.String())
		}
		return nil
	})
	if n := len(mlogs.lines("slave connected")); n != 1 {
		t.Fatalf("%d connections reached the HA protocol, want 1", n)
	}
}

// TestAPITLSAndToken serves the API over mutual TLS with a bearer token.
func TestAPITLSAndToken(t *testing.T) {
	p := newPKIFiles(t)
	const token = "s3cret-token-0123456789"
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := ReadToken(tokFile)
	if err != nil || tok != token {
		t.Fatalf("ReadToken = %q, %v", tok, err)
	}
	m := startNode(t, Config{
		Role: core.AsyncMaster, DataDir: t.TempDir(), Listen: "127.0.0.1:0", HAListen: "127.0.0.1:0",
		SegmentSize: 1 << 20, Registry: pluginhost.Builtin(),
		APITLS:   mustTLS(t)(ServerTLS(p.srvCert, p.srvKey, p.caFile)),
		APIToken: tok,
	})
	url := m.n.URL()
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("URL %s", url)
	}
	get := func(hc *http.Client, path string) (int, error) {
		defer hc.CloseIdleConnections()
		resp, err := hc.Get(url + path)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	withCert := mustTLS(t)(ClientTLS(p.caFile, p.slaveCert, p.slaveKey, ""))
	noCert := mustTLS(t)(ClientTLS(p.caFile, "", "", ""))
	wrongCA := mustTLS(t)(ClientTLS(p.otherCAFile, p.slaveCert, p.slaveKey, ""))
	strangerCert := mustTLS(t)(ClientTLS(p.caFile, p.strangerCert, p.strangerKey, ""))
	for _, tc := range []struct {
		name string
		hc   *http.Client
		path string
		code int // 0: a TLS error
	}{
		{"certificate and token", APIClient(withCert, token, 10*time.Second), "/v1/status", 200},
		{"certificate, no token", APIClient(withCert, "", 10*time.Second), "/v1/status", 401},
		{"certificate, wrong token", APIClient(withCert, token+"x", 10*time.Second), "/v1/status", 401},
		{"certificate, no token, healthz", APIClient(withCert, "", 10*time.Second), "/healthz", 200},
		{"certificate, no token, readyz", APIClient(withCert, "", 10*time.Second), "/readyz", 200},
		{"token, no certificate", APIClient(noCert, token, 10*time.Second), "/v1/status", 0},
		{"certificate from another CA", APIClient(strangerCert, token, 10*time.Second), "/v1/status", 0},
		{"server not trusted", APIClient(wrongCA, token, 10*time.Second), "/v1/status", 0},
		{"plain http", &http.Client{Timeout: 10 * time.Second}, "/healthz", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := url
			if tc.name == "plain http" {
				u = strings.Replace(url, "https://", "http://", 1)
				resp, err := tc.hc.Get(u + tc.path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tc.code {
					t.Fatalf("plain http: %d", resp.StatusCode)
				}
				return
			}
			code, err := get(tc.hc, tc.path)
			if tc.code == 0 {
				if err == nil {
					t.Fatalf("got %d, want a TLS error", code)
				}
				return
			}
			if err != nil || code != tc.code {
				t.Fatalf("got %d, %v; want %d", code, err, tc.code)
			}
		})
	}
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	for content, ok := range map[string]bool{
		"0123456789abcdef\n":        true,
		"  0123456789abcdef  \r\n":  true,
		"short\n":                   false,
		"":                          false,
		"0123456789 abcdef":         false,
		"0123456789abcdef\x00":      false,
		"0123456789abcdé0123456789": false,
		strings.Repeat("a", 5000):   false,
	} {
		f := filepath.Join(dir, "t")
		os.WriteFile(f, []byte(content), 0o600)
		_, err := ReadToken(f)
		if (err == nil) != ok {
			t.Errorf("ReadToken(%q): %v", content, err)
		}
		if err != nil && !errors.Is(err, ErrBadToken) {
			t.Errorf("error %v does not match ErrBadToken", err)
		}
	}
	if _, err := ReadToken(filepath.Join(dir, "absent")); !errors.Is(err, ErrBadToken) {
		t.Errorf("absent file: %v", err)
	}
	if _, err := ServerTLS(filepath.Join(dir, "t"), filepath.Join(dir, "t"), ""); !errors.Is(err, ErrTLSFiles) {
		t.Errorf("ServerTLS with a bad file: %v", err)
	}
	if _, err := LoadCAs(filepath.Join(dir, "t")); !errors.Is(err, ErrTLSFiles) {
		t.Errorf("LoadCAs with no PEM: %v", err)
	}
}
