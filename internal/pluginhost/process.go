package pluginhost

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/replicatorhq/replicator/sdk/metaplugin"
	"github.com/replicatorhq/replicator/sdk/plugin"
	"github.com/replicatorhq/replicator/sdk/storeplugin"
	"github.com/replicatorhq/replicator/sdk/transportplugin"
)

// ErrIncompatible marks a file in the plugin directory that is not a
// compatible replicator plugin: a foreign executable, another protocol
// version, a failed checksum, or a Describe answer that contradicts its
// file name.
var ErrIncompatible = errors.New("pluginhost: not a compatible replicator plugin")

// LaunchOptions configure how plugin processes start.
type LaunchOptions struct {
	// Checksum pins the binary's SHA-256 (go-plugin SecureConfig); nil: not pinned.
	Checksum []byte
	// AutoMTLS makes go-plugin set up mutual TLS on the plugin's socket.
	AutoMTLS bool
	// StartTimeout bounds the handshake (default 10s).
	StartTimeout time.Duration
	// Logger is the parent of the plugin's relayed logs, which appear under
	// the binary's name; nil: no logs.
	Logger hclog.Logger
	// OnExit is called once, from its own goroutine, when the process exits
	// without Kill having been called (a crash).
	OnExit func(p *Process)
}

// kindPlugins are the host halves of every kind's go-plugin plugin.
func kindPlugins() goplugin.PluginSet {
	return goplugin.PluginSet{
		plugin.InfoPluginName: &plugin.InfoPlugin{},
		plugin.KindStore:      &storeplugin.Plugin{},
		plugin.KindMetadata:   &metaplugin.Plugin{},
		plugin.KindTransport:  &transportplugin.Plugin{},
	}
}

// Process is one running plugin binary.
type Process struct {
	Cand Candidate
	Info plugin.Info // what the binary said it is

	client *goplugin.Client
	rpc    goplugin.ClientProtocol
	pid    int

	started time.Time

	mu      sync.Mutex
	killed  bool
	stopMon chan struct{}
	monDone chan struct{}
}

// quietExit is the logger go-plugin gets: its INFO "plugin process exited"
// for a clean exit (every stopped probe of `replicator plugins`, every
// plugin stopped at shutdown) becomes a DEBUG line. A process that exits
// with an error is still go-plugin's ERROR, and one that exits on its own
// is the host's crash report. The plugins' relayed logs (Named) are
// unchanged.
type quietExit struct{ hclog.Logger }

func (q quietExit) Info(msg string, args ...any) {
	if msg == "plugin process exited" {
		q.Logger.Debug(msg, args...)
		return
	}
	q.Logger.Info(msg, args...)
}

// exitPoll is how often a process's monitor checks for an exit.
const exitPoll = 100 * time.Millisecond

// Launch starts the plugin binary of c, completes the handshake, asks it to
// Describe itself and checks the answer against the file name. The error
// wraps ErrIncompatible when the file is not a compatible plugin, and names
// the file.
func Launch(c Candidate, opts LaunchOptions) (*Process, error) {
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	cmd := exec.Command(c.Path)
	setParentDeathSignal(cmd)
	cfg := &goplugin.ClientConfig{
		HandshakeConfig:  plugin.Handshake,
		VersionedPlugins: map[int]goplugin.PluginSet{plugin.ProtocolVersion: kindPlugins()},
		Cmd:              cmd,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		Logger:           quietExit{opts.Logger},
		AutoMTLS:         opts.AutoMTLS,
		StartTimeout:     opts.StartTimeout,
		GRPCDialOptions:  plugin.DialOptions(),
	}
	if opts.Checksum != nil {
		cfg.SecureConfig = &goplugin.SecureConfig{Checksum: opts.Checksum, Hash: sha256.New()}
	}
	client := goplugin.NewClient(cfg)
	fail := func(format string, args ...any) (*Process, error) {
		client.Kill()
		return nil, fmt.Errorf("%w: %s: %s", ErrIncompatible, c.Path, fmt.Sprintf(format, args...))
	}
	rpc, err := client.Client()
	if err != nil {
		if errors.Is(err, goplugin.ErrChecksumsDoNotMatch) {
			return fail("its SHA-256 does not match the pinned checksum")
		}
		return fail("handshake failed: %v", err)
	}
	raw, err := rpc.Dispense(plugin.InfoPluginName)
	if err != nil {
		return fail("no Info service: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.StartTimeout)
	info, err := raw.(*plugin.InfoClient).Describe(ctx)
	cancel()
	if err != nil {
		return fail("Describe: %v", err)
	}
	if info.Kind != c.Kind || info.Name != c.Name {
		return fail("its file name says %s %q but it describes itself as %s %q", c.Kind, c.Name, info.Kind, info.Name)
	}
	if v := client.NegotiatedVersion(); v != plugin.ProtocolVersion {
		return fail("protocol version %d, want %d", v, plugin.ProtocolVersion)
	}
	p := &Process{Cand: c, Info: info, client: client, rpc: rpc, started: time.Now(), stopMon: make(chan struct{}), monDone: make(chan struct{})}
	if rc := client.ReattachConfig(); rc != nil {
		p.pid = rc.Pid
	}
	go p.monitor(opts.OnExit)
	return p, nil
}

// Pid is the plugin's process ID.
func (p *Process) Pid() int { return p.pid }

// Dispense returns the host half of the plugin's kind.
func (p *Process) Dispense() (any, error) {
	raw, err := p.rpc.Dispense(p.Cand.Kind)
	if err != nil {
		return nil, fmt.Errorf("pluginhost: %s: %w", p.Cand.Path, err)
	}
	return raw, nil
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool { return p.client.Exited() }

func (p *Process) monitor(onExit func(*Process)) {
	defer close(p.monDone)
	t := time.NewTicker(exitPoll)
	defer t.Stop()
	for {
		select {
		case <-p.stopMon:
			return
		case <-t.C:
		}
		if !p.client.Exited() {
			continue
		}
		p.mu.Lock()
		crashed := !p.killed
		p.mu.Unlock()
		if crashed && onExit != nil {
			onExit(p)
		}
		return
	}
}

// Kill stops the plugin: a graceful shutdown request, then SIGKILL after 2s
// (go-plugin's Kill). Idempotent.
func (p *Process) Kill() {
	p.mu.Lock()
	already := p.killed
	p.killed = true
	p.mu.Unlock()
	if already {
		return
	}
	close(p.stopMon)
	<-p.monDone
	p.client.Kill()
}
