package pluginhost_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/replicatorhq/replicator/internal/pluginhost"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/meta"
	"github.com/replicatorhq/replicator/sdk/metaplugin"
	"github.com/replicatorhq/replicator/sdk/plugin"
	"github.com/replicatorhq/replicator/sdk/transportplugin"
	"github.com/replicatorhq/replicator/transport"
)

// serveMetadata serves a tiny metadata store keeping its documents in one
// JSON file of req.Dir (state survives a restart of the process).
func serveMetadata(name string) {
	metaplugin.Serve(name, "1.0.0", func(_ context.Context, req metaplugin.OpenRequest) (meta.Store, error) {
		return &fileMeta{path: filepath.Join(req.Dir, "docs.json")}, nil
	})
}

type fileMeta struct {
	mu   sync.Mutex
	path string
}

func (m *fileMeta) load() map[string]meta.Document {
	docs := map[string]meta.Document{}
	if b, err := os.ReadFile(m.path); err == nil {
		json.Unmarshal(b, &docs)
	}
	return docs
}

func (m *fileMeta) save(docs map[string]meta.Document) error {
	b, _ := json.Marshal(docs)
	return os.WriteFile(m.path, b, 0o644)
}

func (m *fileMeta) List(context.Context) ([]meta.Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []meta.Entry
	for _, d := range m.load() {
		out = append(out, meta.Entry{Name: d.Name, Version: d.Version})
	}
	return out, nil
}

func (m *fileMeta) Get(_ context.Context, name string) (meta.Document, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.load()[name]
	if !ok {
		return meta.Document{}, meta.ErrNotFound
	}
	return d, nil
}

func (m *fileMeta) Put(_ context.Context, name string, body json.RawMessage) (meta.Document, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	docs := m.load()
	d := docs[name]
	d.Name, d.Body = name, body
	d.Version.Counter++
	docs[name] = d
	return d, m.save(docs)
}

func (m *fileMeta) Apply(_ context.Context, in []meta.Document) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	docs := m.load()
	for _, d := range in {
		docs[d.Name] = d
	}
	return m.save(docs)
}

func (m *fileMeta) Close() error { return nil }

// serveTransport serves the TCP transport as an external transport plugin.
func serveTransport(name string) {
	transportplugin.Serve(name, "1.0.0", func(context.Context, transportplugin.OpenRequest) (transport.Transport, error) {
		return tcptransport.New(tcptransport.DefaultOptions()), nil
	})
}

// waitFor polls cond (a real process is involved) until it holds or 20 s
// pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func killOnly(t *testing.T, h *pluginhost.Host) int {
	t.Helper()
	procs := h.Processes()
	if len(procs) != 1 {
		t.Fatalf("%d plugin processes, want 1", len(procs))
	}
	pid := procs[0].Pid()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestPluginHostMetadataRestart: a metadata plugin killed underneath the
// host is restarted (with backoff), counted in
// replicator_plugin_restarts_total, and serves the same documents; the node
// is not told to stop. Crashing again before it ran RestartStableAfter,
// past MaxRestarts, goes to OnCrash.
func TestPluginHostMetadataRestart(t *testing.T) {
	crashed := make(chan error, 1)
	reg, h, logs := newHost(t, pluginhost.HostOptions{
		MaxRestarts:        1,
		RestartBackoff:     10 * time.Millisecond,
		RestartStableAfter: time.Hour,
		OnCrash:            func(_ pluginhost.Entry, err error) { crashed <- err },
	})
	if err := h.LoadDir(pluginDir(t, "replicator-metadata-fix")); err != nil {
		t.Fatal(err)
	}
	metrics := prometheus.NewRegistry()
	if err := h.RegisterMetrics(metrics); err != nil {
		t.Fatal(err)
	}
	open, err := reg.Metadata("fix")
	if err != nil {
		t.Fatal(err)
	}
	st, err := open(t.TempDir(), pluginhost.MetadataOptions{})
	if err != nil {
		t.Fatalf("opening the external metadata plugin: %v", err)
	}
	defer st.Close()
	ctx := context.Background()
	if _, err := st.Put(ctx, "topics.json", []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	old := killOnly(t, h)
	waitFor(t, "restart", func() bool { return testutil.ToFloat64(h.RestartCounter().WithLabelValues("metadata", "fix")) == 1 })
	if ps := h.Processes(); len(ps) != 1 || ps[0].Pid() == old {
		t.Fatalf("processes after the restart: %v", ps)
	}
	d, err := st.Get(ctx, "topics.json")
	if err != nil || string(d.Body) != `{"a":1}` {
		t.Fatalf("Get after the restart: %+v %v", d, err)
	}
	if _, err := st.Put(ctx, "topics.json", []byte(`{"a":2}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-crashed:
		t.Fatalf("OnCrash called for a restartable plugin: %v", err)
	default:
	}
	if n, err := testutil.GatherAndCount(metrics, "replicator_plugin_restarts_total"); err != nil || n != 1 {
		t.Fatalf("replicator_plugin_restarts_total on the registry: %d %v", n, err)
	}
	for _, want := range []string{"plugin crashed", "restarting plugin", "plugin restarted"} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("log lacks %q:\n%s", want, logs.String())
		}
	}

	// A second crash, right away: over MaxRestarts (1), the host gives up.
	killOnly(t, h)
	select {
	case err := <-crashed:
		if !errors.Is(err, plugin.ErrPluginShutdown) || !strings.Contains(err.Error(), "replicator-metadata-fix") {
			t.Fatalf("crash error %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("giving up was not reported")
	}
	if n := testutil.ToFloat64(h.CrashCounter().WithLabelValues("metadata", "fix")); n != 2 {
		t.Fatalf("replicator_plugin_crashes_total = %v, want 2", n)
	}
	if _, err := st.Get(ctx, "topics.json"); !errors.Is(err, plugin.ErrPluginShutdown) {
		t.Fatalf("Get after giving up: %v, want ErrPluginShutdown", err)
	}
}

// TestPluginHostTransport: an external transport plugin is loaded and used
// through the registry like the builtin: the host gets kernel sockets and
// moves the bytes itself, so connections outlive a crash of the plugin,
// which goes to OnCrash (transports are not restarted).
func TestPluginHostTransport(t *testing.T) {
	crashed := make(chan error, 1)
	reg, h, _ := newHost(t, pluginhost.HostOptions{OnCrash: func(_ pluginhost.Entry, err error) { crashed <- err }})
	if err := h.LoadDir(pluginDir(t, "replicator-transport-fix")); err != nil {
		t.Fatal(err)
	}
	if e := h.Entries(); len(e) != 2 || e[1].Kind != "transport" || e[1].Name != "fix" || e[1].Builtin {
		t.Fatalf("entries %+v", e) // [0] is the store "good" builtin of newHost
	}
	f, err := reg.Transport("fix")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := f(pluginhost.TransportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := tr.Dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := c.(*net.TCPConn); !ok {
		t.Fatalf("dialed %T, want *net.TCPConn", c)
	}
	killOnly(t, h)
	select {
	case err := <-crashed:
		if !errors.Is(err, plugin.ErrPluginShutdown) || !strings.Contains(err.Error(), "replicator-transport-fix") {
			t.Fatalf("crash error %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the crash was not detected")
	}
	// The host's sockets still carry bytes both ways.
	msg := bytes.Repeat([]byte("ha"), 1000)
	go c.Write(msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(s, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("read after the plugin died: %v", err)
	}
	if _, err := tr.Dial(context.Background(), ln.Addr().String()); !errors.Is(err, plugin.ErrPluginShutdown) {
		t.Fatalf("Dial after the crash: %v, want ErrPluginShutdown", err)
	}
	if _, err := ln.Accept(); !errors.Is(err, plugin.ErrPluginShutdown) {
		t.Fatalf("Accept after the crash: %v, want ErrPluginShutdown", err)
	}
}
