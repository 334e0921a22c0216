package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The external plugin binaries, built once (without -race: they are
// separate processes) by pluginBinaries.
var (
	pluginOnce sync.Once
	pluginDir  string
	pluginErr  error
)

// pluginBinaries builds the first-party plugins (store, metadata,
// transport) and the example store plugin into a directory, as `make
// plugins` does.
func pluginBinaries(t *testing.T) string {
	t.Helper()
	pluginOnce.Do(func() {
		pluginDir = filepath.Join(filepath.Dir(binPath), "plugins")
		for _, pkg := range []string{
			"../../plugins/commitlog/cmd/replicator-store-commitlog",
			"../../plugins/metadata/cmd/replicator-metadata-files",
			"../../plugins/transport-tcp/cmd/replicator-transport-tcp",
			"../../examples/store-plugin",
		} {
			name := filepath.Base(pkg)
			if name == "store-plugin" {
				name = "replicator-store-filestore"
			}
			cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", filepath.Join(pluginDir, name), pkg)
			if out, err := cmd.CombinedOutput(); err != nil {
				pluginErr = fmt.Errorf("building %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	return pluginDir
}

// TestE2EPluginsList: `replicator plugins` lists builtins and externals, and
// names a foreign executable without failing the others.
func TestE2EPluginsList(t *testing.T) {
	t.Parallel()
	src := pluginBinaries(t)
	dir := t.TempDir()
	for _, n := range []string{"replicator-store-commitlog", "replicator-store-filestore", "replicator-metadata-files", "replicator-transport-tcp"} {
		if err := os.Symlink(filepath.Join(src, n), filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "replicator-store-foreign"), []byte("#!/bin/sh\necho hello\n"), 0o755)
	code, out, errOut := runCLI(t, "", "--plugins", dir, "plugins")
	if code != 1 || !strings.Contains(errOut, "not a compatible replicator plugin: "+filepath.Join(dir, "replicator-store-foreign")) {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	for _, want := range []string{
		"store      commitlog  dev      external  " + filepath.Join(dir, "replicator-store-commitlog"),
		"store      filestore  0.1.0    external  " + filepath.Join(dir, "replicator-store-filestore"),
		"metadata   files      dev      external  " + filepath.Join(dir, "replicator-metadata-files"),
		"transport  tcp        dev      external  " + filepath.Join(dir, "replicator-transport-tcp"),
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("listing lacks %q:\n%s", want, out)
		}
	}
}

// TestE2EPluginsExternalStore replicates master to slave with every plugin
// external on both nodes: the store (the first-party commitlog plugin, and
// the example filestore plugin built on the SDK only), the metadata store
// and the transport (the TCP transport as a control-only plugin: it
// listens and dials, the node moves the bytes on the sockets it hands over).
func TestE2EPluginsExternalStore(t *testing.T) {
	t.Parallel()
	plugins := pluginBinaries(t)
	for _, storeName := range []string{"commitlog", "filestore"} {
		t.Run(storeName, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"--store", storeName, "--transport", "tcp"}
			m := startMasterWith(t, filepath.Join(dir, "m"), []string{"--plugins", plugins}, append(args, "--replication", "sync")...)
			s := startSlaveWith(t, filepath.Join(dir, "s"), m, []string{"--plugins", plugins}, args...)
			waitSlaves(t, m, 1)
			const n = 200
			body := strings.Repeat("x", 6000) // 200 x 6 KB spans two 1 MiB segments
			for i := range n {
				a := put(t, m.api, "TopicExt", fmt.Sprintf("%d:%s", i, body))
				if a.Status != "PUT_OK" {
					t.Fatalf("put %d: %+v", i, a)
				}
			}
			waitCaughtUp(t, m, s)
			mm, sm := readAll(t, m.api, 0), readAll(t, s.api, 0)
			if len(mm) != n || len(sm) != n {
				t.Fatalf("master has %d messages, slave %d, want %d", len(mm), len(sm), n)
			}
			for i := range mm {
				if mm[i].Offset != sm[i].Offset || string(mm[i].Body) != string(sm[i].Body) || !strings.HasPrefix(string(sm[i].Body), fmt.Sprintf("%d:", i)) {
					t.Fatalf("message %d differs: master %+v, slave %+v", i, mm[i], sm[i])
				}
			}
			// Metadata: put on the master (its external plugin), synced by
			// the slave into its own external plugin.
			code, b := httpDo(t, "PUT", m.api+"/v1/metadata/topics.json", nil, []byte(`{"topicConfigTable":{"TopicExt":{"readQueueNums":8}}}`))
			if code != 200 {
				t.Fatalf("metadata put: %d %s", code, b)
			}
			eventually(t, "metadata synced", func() error {
				code, b := httpDo(t, "GET", s.api+"/v1/metadata/topics.json", nil, nil)
				if code != 200 || !strings.Contains(string(b), `"readQueueNums":8`) {
					return fmt.Errorf("slave has %d %s", code, b)
				}
				return nil
			})
			for _, p := range []*proc{m, s} {
				kids := children(p.cmd.Process.Pid)
				if len(kids) != 3 {
					t.Fatalf("%s runs %d plugin processes, want 3 (store, metadata, transport)", p.name, len(kids))
				}
				for _, kind := range []string{"store", "metadata", "transport"} {
					if pluginChild(t, p, kind) == 0 {
						t.Fatalf("%s runs no %s plugin", p.name, kind)
					}
				}
				p.stop()
				for _, k := range kids {
					waitGone(t, k)
				}
			}
		})
	}
}

// TestE2EPluginsCrashAndOrphans: a metadata plugin killed underneath its
// node is restarted (the node keeps serving; counted in
// replicator_plugin_restarts_total); a store or transport plugin killed
// underneath its node shuts the node down (exit 1, logged); a node killed
// with SIGKILL takes its plugins with it.
func TestE2EPluginsCrashAndOrphans(t *testing.T) {
	t.Parallel()
	plugins := pluginBinaries(t)
	dir := t.TempDir()
	m := startMasterWith(t, filepath.Join(dir, "m"), []string{"--plugins", plugins}, "--store", "commitlog")
	put(t, m.api, "TopicCrash", "before")
	if kids := children(m.cmd.Process.Pid); len(kids) != 3 {
		t.Fatalf("%d plugin processes, want 3", len(kids))
	}

	// The metadata plugin: restarted, the node stays up and serves it.
	meta := pluginChild(t, m, "metadata")
	syscall.Kill(meta, syscall.SIGKILL)
	eventually(t, "metadata plugin restarted", func() error {
		code, b := httpDo(t, "GET", m.api+"/metrics", nil, nil)
		if code != 200 || !strings.Contains(string(b), `replicator_plugin_restarts_total{kind="metadata",name="files"} 1`) {
			return fmt.Errorf("metrics %d: no restart counted", code)
		}
		return nil
	})
	if p := pluginChild(t, m, "metadata"); p == 0 || p == meta {
		t.Fatalf("metadata plugin after the restart: pid %d (was %d)", p, meta)
	}
	code, b := httpDo(t, "PUT", m.api+"/v1/metadata/topics.json", nil, []byte(`{"topicConfigTable":{"TopicCrash":{"readQueueNums":4}}}`))
	if code != 200 {
		t.Fatalf("metadata put after the restart: %d %s", code, b)
	}
	if a := put(t, m.api, "TopicCrash", "after"); a.Status != "PUT_OK" {
		t.Fatalf("put after the metadata restart: %+v", a)
	}

	// The store plugin: not restarted, the node stops.
	syscall.Kill(pluginChild(t, m, "store"), syscall.SIGKILL)
	waitExit1(t, m, "store")

	// The transport plugin: not restarted either.
	m3 := startMasterWith(t, filepath.Join(dir, "m3"), []string{"--plugins", plugins}, "--store", "commitlog")
	syscall.Kill(pluginChild(t, m3, "transport"), syscall.SIGKILL)
	waitExit1(t, m3, "transport")

	// SIGKILL the node: its plugins must not outlive it.
	m2 := startMasterWith(t, filepath.Join(dir, "m2"), []string{"--plugins", plugins}, "--store", "filestore")
	kids := children(m2.cmd.Process.Pid)
	if len(kids) != 3 {
		t.Fatalf("%d plugin processes, want 3", len(kids))
	}
	m2.signal(syscall.SIGKILL)
	<-m2.done
	for _, k := range kids {
		waitGone(t, k)
	}
}

// waitExit1 waits for p to stop with status 1 after its kind plugin was
// killed, and checks the log says so.
func waitExit1(t *testing.T, p *proc, kind string) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(waitTimeout):
		t.Fatalf("the node did not stop after its %s plugin crashed", kind)
	}
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("node exit: %v, want status 1", p.err)
	}
	logb, _ := os.ReadFile(p.log)
	if !strings.Contains(string(logb), "plugin crashed") || !strings.Contains(string(logb), "an external plugin crashed; shutting down") ||
		!strings.Contains(string(logb), "replicator-"+kind+"-") {
		t.Fatalf("no %s plugin crash in the log:\n%s", kind, logb)
	}
}

// pluginChild is the pid of p's plugin process of kind (0: none), found by
// the binary name in its command line.
func pluginChild(t *testing.T, p *proc, kind string) int {
	t.Helper()
	for _, k := range children(p.cmd.Process.Pid) {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(k), "cmdline"))
		if err != nil {
			continue
		}
		argv0, _, _ := strings.Cut(string(b), "\x00")
		if strings.HasPrefix(filepath.Base(argv0), "replicator-"+kind+"-") {
			return k
		}
	}
	return 0
}

func startMasterWith(t *testing.T, dir string, global []string, extra ...string) *proc {
	t.Helper()
	pp := ports(t, 2)
	args := append(append([]string{"--log-level", "info"}, global...), "master", "--data", dir, "--listen", pp[0], "--ha-listen", pp[1], "--segment-size", testSegment)
	p := start(t, "master", append(args, extra...)...)
	p.api, p.ha = "http://"+pp[0], pp[1]
	p.waitReady()
	return p
}

func startSlaveWith(t *testing.T, dir string, m *proc, global []string, extra ...string) *proc {
	t.Helper()
	pp := ports(t, 1)
	args := append(append([]string{"--log-level", "info"}, global...), "slave", "--data", dir, "--listen", pp[0], "--master", m.ha,
		"--master-api", m.api, "--segment-size", testSegment, "--reconnect-delay", "100ms", "--metadata-interval", "1s")
	p := start(t, "slave", append(args, extra...)...)
	p.api = "http://" + pp[0]
	p.waitReady()
	return p
}

// children lists the processes whose parent is pid (Linux /proc).
func children(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) && f[0] != "Z" {
			out = append(out, child)
		}
	}
	return out
}

// waitGone waits (on a pidfd, 30 s at most) until pid has exited.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(waitTimeout/time.Millisecond))
	if err != nil || n != 1 {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("plugin %d still running (poll %d, %v)", pid, n, err)
	}
}
