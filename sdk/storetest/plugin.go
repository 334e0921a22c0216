package storetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/replicatorhq/replicator/sdk/plugin"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/sdk/storeplugin"
)

// PluginFactory serves the stores that open opens through the plugin's gRPC
// shim, in process (go-plugin's TestPluginGRPCConn over a real unix
// socket), and returns the host-side clients: Run(t, PluginFactory(...))
// checks a store across the gRPC shim without a second process.
func PluginFactory(open storeplugin.Opener, cfg storeplugin.ClientConfig) Factory {
	return func(t *testing.T, dir string, segSize int64) store.Store {
		t.Helper()
		cl, err := ServePlugin(t, open).Open(context.Background(), storeplugin.OpenRequest{Dir: dir, SegmentSize: segSize}, cfg)
		if err != nil {
			t.Fatalf("open through the plugin: %v", err)
		}
		return cl
	}
}

// ServePlugin serves a store plugin in process for the rest of the test and
// returns the host's unopened connection to it.
func ServePlugin(t testing.TB, open storeplugin.Opener) *storeplugin.Conn {
	t.Helper()
	client, server := goplugin.TestPluginGRPCConn(t, false, map[string]goplugin.Plugin{
		"store": &storeplugin.Plugin{Open: open},
	})
	_ = server // stopped by client.Close, through go-plugin's controller
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense("store")
	if err != nil {
		t.Fatalf("dispense: %v", err)
	}
	return raw.(*storeplugin.Conn)
}

// processEnv marks a test binary that ProcessFactory started as a plugin.
const processEnv = "REPLICATOR_STORETEST_PLUGIN"

// ServeInTestMain makes a test binary its own store plugin: when
// ProcessFactory started this process as the plugin, it serves open and
// exits when the host shuts it down; otherwise it returns at once. Call it first in TestMain:
//
//	func TestMain(m *testing.M) {
//		storetest.ServeInTestMain(open)
//		os.Exit(m.Run())
//	}
func ServeInTestMain(open storeplugin.Opener) {
	if os.Getenv(processEnv) == "" {
		return
	}
	storeplugin.Serve("storetest", "test", open)
	os.Exit(0) // the host shut the plugin down: never run the tests here
}

// ProcessFactory opens every store through a plugin process, as the
// daemon does: the binary at path (empty: this test binary, which then
// serves through ServeInTestMain), started through go-plugin with the
// SDK's handshake and gRPC options, its store opened through the host
// client (storeplugin.Client with cfg). A process whose store was closed
// opens the next one (a store plugin may Open again after Close), so the
// suite starts only as many processes as it holds stores open at once;
// they are killed when t ends.
func ProcessFactory(t *testing.T, path string, cfg storeplugin.ClientConfig) Factory {
	pool := &processPool{path: path}
	t.Cleanup(pool.kill)
	return func(t *testing.T, dir string, segSize int64) store.Store {
		t.Helper()
		p, err := pool.get()
		if err != nil {
			t.Fatal(err)
		}
		cl, err := p.conn.Open(context.Background(), storeplugin.OpenRequest{Dir: dir, SegmentSize: segSize}, cfg)
		if err != nil {
			pool.drop(p)
			t.Fatalf("open through the plugin process: %v", err)
		}
		return &pooledStore{Client: cl, release: func() { pool.put(p) }}
	}
}

// StartPlugin starts the store plugin binary at path (empty: this test
// binary, see ServeInTestMain) for the rest of the test and returns the
// host's unopened connection to it.
func StartPlugin(t testing.TB, path string) *storeplugin.Conn {
	t.Helper()
	p, err := startProcess(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.client.Kill)
	return p.conn
}

type process struct {
	client *goplugin.Client
	conn   *storeplugin.Conn
}

func startProcess(path string) (*process, error) {
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("test binary: %w", err)
		}
		path = exe
	}
	cmd := exec.Command(path)
	cmd.Env = append(os.Environ(), processEnv+"=1")
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig: plugin.Handshake,
		VersionedPlugins: map[int]goplugin.PluginSet{plugin.ProtocolVersion: plugin.PluginSet(
			plugin.Info{Kind: plugin.KindStore}, &storeplugin.Plugin{})},
		Cmd:              cmd,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		GRPCDialOptions:  plugin.DialOptions(),
		Logger:           hclog.NewNullLogger(),
	})
	rpc, err := client.Client()
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("start the store plugin %s: %w", path, err)
	}
	raw, err := rpc.Dispense(plugin.KindStore)
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("dispense from %s: %w", path, err)
	}
	return &process{client: client, conn: raw.(*storeplugin.Conn)}, nil
}

// processPool hands out plugin processes whose store is closed.
type processPool struct {
	path string
	mu   sync.Mutex
	idle []*process
	all  []*process
}

func (p *processPool) get() (*process, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		pr := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return pr, nil
	}
	p.mu.Unlock()
	pr, err := startProcess(p.path)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.all = append(p.all, pr)
	p.mu.Unlock()
	return pr, nil
}

func (p *processPool) put(pr *process) {
	p.mu.Lock()
	p.idle = append(p.idle, pr)
	p.mu.Unlock()
}

// drop kills a process whose store could not be opened.
func (p *processPool) drop(pr *process) { pr.client.Kill() }

func (p *processPool) kill() {
	p.mu.Lock()
	all := p.all
	p.all, p.idle = nil, nil
	p.mu.Unlock()
	for _, pr := range all {
		pr.client.Kill()
	}
}

// pooledStore returns its process to the pool once closed.
type pooledStore struct {
	*storeplugin.Client
	release func()
	once    sync.Once
}

func (s *pooledStore) Close() error {
	err := s.Client.Close()
	s.once.Do(s.release)
	return err
}
