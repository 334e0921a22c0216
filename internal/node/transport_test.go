package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/pluginhost"
	"github.com/replicatorhq/replicator/transport"
	"github.com/replicatorhq/replicator/transport/memtransport"
)

// memPlugin is a third-party transport plugin: memtransport behind the
// transport.Securer capability. Secure records what the node asked for and
// returns a transport that counts its calls, so the test sees that the
// node runs on the secured transport and never needed the builtin's type.
type memPlugin struct {
	*memtransport.Transport
	mu      sync.Mutex
	secured []transport.Security
	calls   *atomic.Int64 // Listen and Dial calls on the secured transport
}

func (p *memPlugin) Secure(s transport.Security) (transport.Transport, error) {
	p.mu.Lock()
	p.secured = append(p.secured, s)
	p.mu.Unlock()
	return countingTransport{p.Transport, p.calls}, nil
}

type countingTransport struct {
	tr    *memtransport.Transport
	calls *atomic.Int64
}

func (c countingTransport) Listen(addr string) (net.Listener, error) {
	c.calls.Add(1)
	return c.tr.Listen(addr)
}

func (c countingTransport) Dial(ctx context.Context, addr string) (net.Conn, error) {
	c.calls.Add(1)
	return c.tr.Dial(ctx, addr)
}

// plainMem is a third-party transport without the Securer capability.
type plainMem struct{ *memtransport.Transport }

// TestThirdPartyTransportPlugin runs a master and a slave on an in-memory
// transport registered as a plugin: the HA security options reach it
// through transport.Securer, replication works on the transport it
// returns, and a transport without the capability refuses TLS and allow
// lists (the node does not start) but runs with limits alone.
func TestThirdPartyTransportPlugin(t *testing.T) {
	dir := t.TempDir()
	mem := memtransport.NewNetwork(memtransport.Config{})
	reg := pluginhost.Builtin()
	plugins := map[string]*memPlugin{}
	var calls atomic.Int64
	for _, name := range []string{"m", "s"} {
		plugins[name] = &memPlugin{Transport: mem.Transport(name), calls: &calls}
	}
	reg.RegisterTransport("mem-m", func(pluginhost.TransportOptions) (transport.Transport, error) { return plugins["m"], nil })
	reg.RegisterTransport("mem-s", func(pluginhost.TransportOptions) (transport.Transport, error) { return plugins["s"], nil })
	reg.RegisterTransport("plain", func(pluginhost.TransportOptions) (transport.Transport, error) {
		return plainMem{mem.Transport("p")}, nil
	})
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	base := Config{Listen: "127.0.0.1:0", SegmentSize: 1 << 20, Registry: reg, Version: "test"}
	allow := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}

	mc := base
	mc.Role, mc.DataDir, mc.HAListen, mc.TransportPlugin = core.AsyncMaster, filepath.Join(dir, "m"), "mem-master:0", "mem-m"
	mc.HA = transport.Security{Allow: allow, MaxConns: 7, MaxConnsPerIP: 3, MaxTransferRate: 1 << 30}
	m := startNode(t, mc)
	mURL := "http://" + m.n.Addr()
	var mst api.Status
	getJSON(t, hc, mURL+"/v1/status", &mst)
	if !strings.HasPrefix(mst.HAAddr, "mem-master:") {
		t.Fatalf("master HA address %q, want one of the in-memory transport", mst.HAAddr)
	}
	want := transport.Security{Allow: allow, MaxConns: 7, MaxConnsPerIP: 3, MaxTransferRate: 1 << 30}
	if got := plugins["m"].secured; len(got) != 1 || fmt.Sprint(got[0]) != fmt.Sprint(want) {
		t.Fatalf("master's transport got %+v, want one Secure with %+v", got, want)
	}

	sc := base
	sc.Role, sc.DataDir, sc.MasterHA, sc.TransportPlugin = core.Slave, filepath.Join(dir, "s"), mst.HAAddr, "mem-s"
	sc.HA.ClientTLS = &tls.Config{ServerName: "master"}
	s := startNode(t, sc)
	if got := plugins["s"].secured; len(got) != 1 || got[0].ClientTLS != sc.HA.ClientTLS || got[0].ServerTLS != nil || got[0].Limited() {
		t.Fatalf("slave's transport got %+v, want ClientTLS alone", got)
	}
	last := putMessages(t, hc, mURL, 20)
	if got := replicated(t, hc, "http://"+s.n.Addr(), last); string(got.Body) != "m19" {
		t.Fatalf("slave's last message %q, want m19", got.Body)
	}
	if calls.Load() < 2 {
		t.Fatalf("%d Listen/Dial calls on the secured transports, want the master's Listen and the slave's Dial", calls.Load())
	}
	hc.CloseIdleConnections()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if err := m.stop(); err != nil {
		t.Fatal(err)
	}

	// Without the capability: TLS or an allow list stops the start ...
	pc := base
	pc.Role, pc.DataDir, pc.HAListen, pc.TransportPlugin = core.AsyncMaster, filepath.Join(dir, "p"), "mem-plain:0", "plain"
	pc.HA.Allow = allow
	n, err := New(pc)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "transport.Securer") {
		t.Fatalf("allow list on a transport without Secure: %v, want a refusal", err)
	}
	// ... limits alone are left to the transport, with a log line.
	logs := &logBuf{}
	pc.HA.Allow, pc.HA.MaxConns, pc.Logger = nil, 2, logs.logger()
	p := startNode(t, pc)
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	if len(logs.lines("HA connection limits are left to the transport")) != 1 {
		t.Fatalf("no log line for the limits left to the transport:\n%s", logs)
	}
}
