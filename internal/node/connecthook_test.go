package node

import (
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/pluginhost"
)

// flapProxy forwards TCP connections to target; cut closes every
// connection open now, as a network flap would.
type flapProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newFlapProxy(t *testing.T, target string) *flapProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &flapProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *flapProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(u, c); u.Close() }()
		go func() { defer p.wg.Done(); io.Copy(c, u); c.Close() }()
	}
}

// cut closes the connections open now; it first waits for one: a slave's
// dial completes (and its hooks may run) before the proxy's Accept returns.
func (p *flapProxy) cut() {
	deadline := time.Now().Add(10 * time.Second)
	p.mu.Lock()
	for len(p.conns) == 0 && time.Now().Before(deadline) {
		p.mu.Unlock()
		time.Sleep(time.Millisecond)
		p.mu.Lock()
	}
	p.mu.Unlock()
	p.closeConns()
}

func (p *flapProxy) closeConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *flapProxy) close() {
	p.ln.Close()
	p.closeConns()
	p.wg.Wait()
}

// TestNodeClassicSlaveConnectHooksPushed: a classic slave node runs the
// OnMasterConnect hooks once per connection that reaches TRANSFER, pushed
// by core (SlaveNode.OnConnect), also when the connection drops and comes
// back within a few milliseconds: a status poll would miss such a flap.
func TestNodeClassicSlaveConnectHooksPushed(t *testing.T) {
	dir := t.TempDir()
	base := Config{Listen: "127.0.0.1:0", SegmentSize: 1 << 20, Registry: pluginhost.Builtin(), ReconnectDelay: 5 * time.Millisecond}
	mc := base
	mc.Role, mc.DataDir, mc.HAListen = core.AsyncMaster, filepath.Join(dir, "m"), "127.0.0.1:0"
	m := startNode(t, mc)
	proxy := newFlapProxy(t, m.n.master.Addr())

	var hooks atomic.Int64
	sc := base
	sc.Role, sc.DataDir, sc.MasterHA = core.Slave, filepath.Join(dir, "s"), proxy.ln.Addr().String()
	sc.Extensions = []Extension{&hookExt{onConnect: func() { hooks.Add(1) }}}
	s := startNode(t, sc)
	for want := int64(1); want <= 4; want++ {
		eventually(t, "OnMasterConnect hooks", 10*time.Second, func() error {
			if got := hooks.Load(); got != want {
				return fmt.Errorf("hooks ran %d times, want %d (reconnects %d)", got, want, s.n.slave.Status().Reconnects)
			}
			return nil
		})
		proxy.cut()
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if err := m.stop(); err != nil {
		t.Fatal(err)
	}
}
