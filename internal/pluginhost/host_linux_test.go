package pluginhost_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/replicatorhq/replicator/examples/store-plugin/filestore"
	"github.com/replicatorhq/replicator/internal/pluginhost"
	"github.com/replicatorhq/replicator/sdk/plugin"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/sdk/storeplugin"
)

// The test binary doubles as the plugin fixtures: started under a name
// replicator-store-<mode> (a symlink in the test's plugin directory) it
// serves that mode instead of running tests.
func TestMain(m *testing.M) {
	if kind, name, ok := pluginhost.ParseName(os.Args[0]); ok {
		switch kind {
		case plugin.KindStore:
			servePlugin(name)
		case plugin.KindMetadata:
			serveMetadata(name)
		case plugin.KindTransport:
			serveTransport(name)
		}
		return
	}
	if dir := os.Getenv("PLUGINHOST_TEST_HOST_DIR"); dir != "" {
		runHost(dir)
		return
	}
	goleak.VerifyTestMain(m)
}

func openFilestore(_ context.Context, req storeplugin.OpenRequest) (store.Store, error) {
	req.Logger.Info("filestore opening", "dir", req.Dir)
	return filestore.Open(req.Dir, req.SegmentSize)
}

func servePlugin(mode string) {
	switch mode {
	case "liar": // its file name says "liar", it says "other"
		storeplugin.Serve("other", "1.0.0", openFilestore)
	case "v2": // speaks only protocol version 2
		hs := plugin.Handshake
		hs.ProtocolVersion = 2
		goplugin.Serve(&goplugin.ServeConfig{
			HandshakeConfig:  hs,
			VersionedPlugins: map[int]goplugin.PluginSet{2: plugin.PluginSet(plugin.Info{Kind: "store", Name: "v2", Version: "2.0.0"}, &storeplugin.Plugin{Open: openFilestore})},
			GRPCServer:       plugin.NewGRPCServer,
		})
	default:
		storeplugin.Serve(mode, "1.2.3", openFilestore)
	}
}

// runHost is the host process of TestPluginHostNoOrphanAfterSIGKILL: it
// opens the external store "good" from dir, prints the plugin's pid and
// waits to be killed.
func runHost(dir string) {
	reg := pluginhost.NewRegistry()
	h, err := pluginhost.NewHost(reg, pluginhost.HostOptions{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	if err := h.LoadDir(dir); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	f, _ := reg.Store("good")
	if _, err := f(filepath.Join(dir, "data"), pluginhost.StoreOptions{SegmentSize: 1 << 20}); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	for _, p := range h.Processes() {
		fmt.Println("pid", p.Pid())
	}
	select {}
}

// pluginDir makes a plugin directory with the fixtures named.
func pluginDir(t *testing.T, names ...string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, n := range names {
		if err := os.Symlink(exe, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newHost(t *testing.T, opts pluginhost.HostOptions) (*pluginhost.Registry, *pluginhost.Host, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "host", Output: logs, Level: hclog.Debug})
	reg := pluginhost.NewRegistry()
	reg.RegisterStore("good", func(string, pluginhost.StoreOptions) (store.Store, error) {
		return nil, errors.New("the builtin was not overridden")
	})
	h, err := pluginhost.NewHost(reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return reg, h, logs
}

func openStore(t *testing.T, reg *pluginhost.Registry, name string, r prometheus.Registerer) store.Store {
	t.Helper()
	f, err := reg.Store(name)
	if err != nil {
		t.Fatal(err)
	}
	st, err := f(t.TempDir(), pluginhost.StoreOptions{SegmentSize: 1 << 20, Registerer: r})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestPluginHostLoad: good plugins load and override the builtin, and bad
// ones (foreign, other protocol version, lying about its name, not
// executable, outside the naming scheme) fail with a message naming them
// without stopping the rest.
func TestPluginHostLoad(t *testing.T) {
	dir := pluginDir(t, "replicator-store-good", "replicator-store-liar", "replicator-store-v2")
	os.WriteFile(filepath.Join(dir, "replicator-store-foreign"), []byte("#!/bin/sh\necho I am not a plugin\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "replicator-store-noexec"), []byte("data"), 0o644)
	os.WriteFile(filepath.Join(dir, "README"), []byte("hello"), 0o755)
	reg, h, logs := newHost(t, pluginhost.HostOptions{BuiltinVersion: "v9", StartTimeout: 5 * time.Second})
	err := h.LoadDir(dir)
	if !errors.Is(err, pluginhost.ErrIncompatible) {
		t.Fatalf("LoadDir: %v, want ErrIncompatible", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"not a compatible replicator plugin: " + filepath.Join(dir, "replicator-store-foreign") + ": handshake failed",
		"not a compatible replicator plugin: " + filepath.Join(dir, "replicator-store-v2") + ": handshake failed",
		"not a compatible replicator plugin: " + filepath.Join(dir, "replicator-store-liar") + ": its file name says store \"liar\" but it describes itself as store \"other\"",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("load error lacks %q:\n%s", want, msg)
		}
	}
	if len(h.Failed()) != 3 {
		t.Fatalf("%d failures, want 3: %v", len(h.Failed()), h.Failed())
	}
	entries := h.Entries()
	if len(entries) != 1 || entries[0] != (pluginhost.Entry{Kind: "store", Name: "good", Version: "1.2.3", Path: filepath.Join(dir, "replicator-store-good")}) {
		t.Fatalf("entries %+v", entries)
	}
	st := openStore(t, reg, "good", nil)
	a, err := st.Append(context.Background(), &record.Message{Topic: "T", Body: []byte("hi")})
	if err != nil || a.Offset != 0 {
		t.Fatalf("append through the external store: %+v %v", a, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// The plugin's log line came through the host's logger under its name.
	if l := logs.String(); !strings.Contains(l, "replicator-store-good") || !strings.Contains(l, "filestore opening") {
		t.Fatalf("plugin logs not relayed:\n%s", l)
	}
}

func sha256File(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return h.Sum(nil)
}

// TestPluginHostChecksum: pinned binaries load only with the right SHA-256,
// from the options or from the directory's SHA256SUMS; AutoMTLS works.
func TestPluginHostChecksum(t *testing.T) {
	dir := pluginDir(t, "replicator-store-good", "replicator-store-other")
	sum := sha256File(t, filepath.Join(dir, "replicator-store-good"))
	bad := bytes.Repeat([]byte{1}, 32)

	reg, h, _ := newHost(t, pluginhost.HostOptions{AutoMTLS: true, Checksums: map[string][]byte{"replicator-store-good": sum, "replicator-store-other": bad}})
	err := h.LoadDir(dir)
	if !errors.Is(err, pluginhost.ErrIncompatible) || !strings.Contains(err.Error(), "replicator-store-other") || !strings.Contains(err.Error(), "SHA-256 does not match") {
		t.Fatalf("LoadDir: %v", err)
	}
	st := openStore(t, reg, "good", nil)
	if _, err := st.Append(context.Background(), &record.Message{Topic: "T", Body: []byte("over mTLS")}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	// The pin file: "other" is not listed, so it is refused.
	os.WriteFile(filepath.Join(dir, pluginhost.ChecksumFile), []byte(fmt.Sprintf("%x  replicator-store-good\n", sum)), 0o644)
	_, h2, _ := newHost(t, pluginhost.HostOptions{})
	err = h2.LoadDir(dir)
	if !errors.Is(err, pluginhost.ErrIncompatible) || !strings.Contains(err.Error(), "replicator-store-other: not listed in the checksum file") {
		t.Fatalf("LoadDir with SHA256SUMS: %v", err)
	}
	if e := h2.Entries(); len(e) != 1 || e[0].Name != "good" {
		t.Fatalf("entries %+v", e)
	}
}

// TestPluginHostCrash: a plugin killed underneath the host is detected,
// logged, counted and reported; the store fails with ErrPluginShutdown.
func TestPluginHostCrash(t *testing.T) {
	crashed := make(chan error, 1)
	reg, h, logs := newHost(t, pluginhost.HostOptions{OnCrash: func(_ pluginhost.Entry, err error) { crashed <- err }})
	if err := h.LoadDir(pluginDir(t, "replicator-store-good")); err != nil {
		t.Fatal(err)
	}
	metrics := prometheus.NewRegistry()
	st := openStore(t, reg, "good", metrics)
	procs := h.Processes()
	if len(procs) != 1 {
		t.Fatalf("%d processes", len(procs))
	}
	if err := syscall.Kill(procs[0].Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-crashed:
		if !errors.Is(err, plugin.ErrPluginShutdown) || !strings.Contains(err.Error(), "replicator-store-good") {
			t.Fatalf("crash error %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the crash was not detected")
	}
	if n := testutil.ToFloat64(h.CrashCounter().WithLabelValues("store", "good")); n != 1 {
		t.Fatalf("replicator_plugin_crashes_total = %v", n)
	}
	if n, err := testutil.GatherAndCount(metrics, "replicator_plugin_crashes_total"); err != nil || n != 1 {
		t.Fatalf("the crash metric is not on the node's registry: %d %v", n, err)
	}
	if !strings.Contains(logs.String(), "plugin crashed") {
		t.Fatalf("no crash log:\n%s", logs.String())
	}
	if _, err := st.Append(context.Background(), &record.Message{Topic: "T", Body: []byte("x")}); !errors.Is(err, plugin.ErrPluginShutdown) {
		t.Fatalf("Append after the crash: %v, want ErrPluginShutdown", err)
	}
	if err := st.Close(); !errors.Is(err, plugin.ErrPluginShutdown) {
		t.Fatalf("Close after the crash: %v", err)
	}
}

// TestPluginHostSharedRegistry: two hosts on one registry (a node that
// builds its host again) count their crashes into the one series the
// registry exposes, not into counters nobody scrapes.
func TestPluginHostSharedRegistry(t *testing.T) {
	metrics := prometheus.NewRegistry()
	crashed := make(chan error, 2)
	var hosts []*pluginhost.Host
	for range 2 {
		reg, h, _ := newHost(t, pluginhost.HostOptions{Registerer: metrics, OnCrash: func(_ pluginhost.Entry, err error) { crashed <- err }})
		if err := h.LoadDir(pluginDir(t, "replicator-store-good")); err != nil {
			t.Fatal(err)
		}
		st := openStore(t, reg, "good", metrics)
		t.Cleanup(func() { st.Close() })
		hosts = append(hosts, h)
	}
	if hosts[0].CrashCounter() != hosts[1].CrashCounter() {
		t.Fatal("the second host did not reuse the registered crash counter")
	}
	for _, h := range hosts {
		if err := syscall.Kill(h.Processes()[0].Pid(), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		select {
		case <-crashed:
		case <-time.After(20 * time.Second):
			t.Fatal("the crash was not detected")
		}
	}
	fams, err := metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got float64
	for _, f := range fams {
		if f.GetName() == "replicator_plugin_crashes_total" {
			for _, m := range f.GetMetric() {
				got += m.GetCounter().GetValue()
			}
		}
	}
	if got != 2 {
		t.Fatalf("replicator_plugin_crashes_total on the shared registry = %v, want 2", got)
	}
}

// alive reports whether pid runs (a zombie counts as gone).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestPluginHostNoOrphanAfterSIGKILL: a host process killed with SIGKILL
// takes its plugin with it (parent-death signal).
func TestPluginHostNoOrphanAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := pluginDir(t, "replicator-store-good")
	exe, _ := os.Executable()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "PLUGINHOST_TEST_HOST_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("host: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pid ")))
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("host said %q", line)
	}
	if !alive(pid) {
		t.Fatalf("plugin %d not running", pid)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	// A pidfd turns readable when the process exits: wait on it (10 s at
	// most) instead of polling.
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return // already gone
		}
		t.Fatal(err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 10_000)
	if err != nil || n != 1 {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("plugin %d outlived its SIGKILLed host (poll %d, %v)", pid, n, err)
	}
	if alive(pid) {
		t.Fatalf("plugin %d still running", pid)
	}
}
