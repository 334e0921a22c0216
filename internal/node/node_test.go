package node

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/pluginhost"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// runNode starts a node in this process (startNode) and returns its API
// URL and a function that stops it and returns Run's error.
func runNode(t *testing.T, cfg Config) (string, func() error) {
	t.Helper()
	s := startNode(t, cfg)
	return "http://" + s.n.Addr(), s.stop
}

func getJSON(t *testing.T, hc *http.Client, url string, v any) {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// TestNodeInProcess runs a master and a slave in this process over real
// TCP, replicates, and shuts both down cleanly without leaking goroutines.
func TestNodeInProcess(t *testing.T) {
	dir := t.TempDir()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	base := Config{Listen: "127.0.0.1:0", SegmentSize: 1 << 20, Registry: pluginhost.Builtin(), Version: "test"}

	mc := base
	mc.Role, mc.DataDir, mc.HAListen = core.AsyncMaster, filepath.Join(dir, "m"), "127.0.0.1:0"
	mc.Profiling = true
	mURL, stopMaster := runNode(t, mc)
	var mst api.Status
	getJSON(t, hc, mURL+"/v1/status", &mst)
	if mst.Role != "ASYNC_MASTER" || mst.HAAddr == "" || mst.SegmentSize != 1<<20 {
		t.Fatalf("master status %+v", mst)
	}
	if resp, err := hc.Get(mURL + "/debug/pprof/heap?debug=1"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("master with Profiling: GET /debug/pprof/heap: %v %v", resp, err)
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	sc := base
	sc.Role, sc.DataDir, sc.MasterHA = core.Slave, filepath.Join(dir, "s"), mst.HAAddr
	sURL, stopSlave := runNode(t, sc)
	if resp, err := hc.Get(sURL + "/debug/pprof/"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("slave without Profiling: GET /debug/pprof/: %v %v", resp, err)
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	last := putMessages(t, hc, mURL, 50)
	getJSON(t, hc, mURL+"/v1/status", &mst)
	if got := replicated(t, hc, sURL, last); string(got.Body) != "m49" {
		t.Fatalf("slave's last message %q, want m49", got.Body)
	}
	var sst api.Status
	getJSON(t, hc, sURL+"/v1/status", &sst)
	if sst.Role != "SLAVE" || sst.MaxOffset != mst.MaxOffset || sst.Master == nil || sst.Master.Addr != mst.HAAddr {
		t.Fatalf("slave status %+v, master max %d", sst, mst.MaxOffset)
	}
	hc.CloseIdleConnections()
	if err := stopSlave(); err != nil {
		t.Fatalf("slave Run: %v", err)
	}
	if err := stopMaster(); err != nil {
		t.Fatalf("master Run: %v", err)
	}
}

// TestNodeStartErrors: start failures are reported and release everything.
func TestNodeStartErrors(t *testing.T) {
	dir := t.TempDir()
	reg := pluginhost.Builtin()
	_, stop := runNode(t, Config{Role: core.AsyncMaster, DataDir: filepath.Join(dir, "a"), Listen: "127.0.0.1:0", HAListen: "127.0.0.1:0", SegmentSize: 1 << 20, Registry: reg})

	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"locked data dir", Config{Role: core.AsyncMaster, DataDir: filepath.Join(dir, "a"), Listen: "127.0.0.1:0", HAListen: "127.0.0.1:0", SegmentSize: 1 << 20, Registry: reg}, "in use by another replicator process"},
		{"unknown store", Config{Role: core.AsyncMaster, DataDir: filepath.Join(dir, "b"), Listen: "127.0.0.1:0", HAListen: "127.0.0.1:0", StorePlugin: "nope", Registry: reg}, "no store plugin"},
		{"unknown transport", Config{Role: core.AsyncMaster, DataDir: filepath.Join(dir, "c"), Listen: "127.0.0.1:0", HAListen: "127.0.0.1:0", TransportPlugin: "nope", SegmentSize: 1 << 20, Registry: reg}, "no transport plugin"},
		{"API port in use", Config{Role: core.AsyncMaster, DataDir: filepath.Join(dir, "d"), Listen: "256.0.0.1:1", HAListen: "127.0.0.1:0", Registry: reg}, "API listen"},
		{"HA port in use", Config{Role: core.AsyncMaster, DataDir: filepath.Join(dir, "e"), Listen: "127.0.0.1:0", HAListen: "256.0.0.1:1", SegmentSize: 1 << 20, Registry: reg}, "master"},
		// A store that refuses to open must give its error, not a panic
		// in the shutdown path (a typed nil store once did).
		{"store refuses to open", Config{Role: core.Slave, DataDir: filepath.Join(dir, "f"), Listen: "127.0.0.1:0", MasterHA: "127.0.0.1:1", SegmentSize: 1 << 20, Registry: reg}, "segment name is not 20 digits"},
	}
	if err := os.MkdirAll(filepath.Join(dir, "f", CommitLogDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f", CommitLogDir, "123"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = n.Run(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want an error with %q", err, tc.want)
			}
		})
	}
	for _, cfg := range []Config{{}, {DataDir: dir}, {DataDir: dir, Listen: ":0", Role: core.Slave, Registry: reg}, {DataDir: dir, Listen: ":0"}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
