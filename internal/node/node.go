package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/pluginhost"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/transport"
)

// Server timeouts and limits of the HTTP API (see api.ServerLimits).
const (
	ReadHeaderTimeout = api.DefaultReadHeaderTimeout
	ReadTimeout       = api.DefaultReadTimeout
	IdleTimeout       = api.DefaultIdleTimeout
	MaxHeaderBytes    = api.DefaultMaxHeaderBytes
	// ShutdownGrace is added to the slave timeout to bound a graceful
	// shutdown: in-flight sync puts wait at most the slave timeout.
	ShutdownGrace = 10 * time.Second
)

// CommitLogDir is where the builtin store keeps its segment files under the
// data directory (RocketMQ's storePathCommitLog).
const CommitLogDir = "commitlog"

// Config configures a Node.
type Config struct {
	Role    core.Role // AsyncMaster, SyncMaster or Slave
	DataDir string    // REQUIRED
	Listen  string    // HTTP API address, REQUIRED

	// Master
	HAListen     string        // HA listen address
	SlaveTimeout time.Duration // sync replication wait
	SyncAcks     int           // slaves that must ack a sync put
	MaxLag       int64         // async back-pressure in bytes (0: off)

	// Slave
	MasterHA  string // master's HA address
	MasterAPI string // master's HTTP API base URL ("" when unknown)
	// ReconnectDelay is the wait after a failed or dropped connection (0:
	// core's default, 5s).
	ReconnectDelay time.Duration

	SegmentSize    int64
	SyncFlush      bool
	MaxMessageSize int64

	StorePlugin     string // default "commitlog"
	TransportPlugin string // default "tcp"
	Registry        *pluginhost.Registry

	Extensions []Extension
	Logger     hclog.Logger // root logger; nil: no logs
	Version    string

	// API security. APITLS serves the API over TLS (with ClientAuth set,
	// clients need certificates); APIToken requires "Authorization: Bearer
	// <token>" on every route except /healthz and /readyz.
	APITLS   *tls.Config
	APIToken string
	// Profiling serves Go's profiling endpoints at /debug/pprof/ on the API
	// (api.Server.EnableProfiling), behind APIToken when it is set.
	Profiling bool
	// APIMaxConns bounds the API's open connections (0:
	// api.DefaultMaxConns; negative: no limit).
	APIMaxConns int

	// HA security, applied by the builtin tcp transport (another transport
	// plugin refuses to start with them). Master: HATLS makes the HA port
	// speak TLS (with ClientAuth set, slaves need certificates);
	// HAAllow lists the peer networks allowed to connect (empty: all);
	// HAAllowClientNames lists the client-certificate names allowed;
	// HAMaxConns and HAMaxConnsPerIP bound the open HA connections (0: no
	// limit). Slave: HATLS is the client configuration used to dial the
	// master.
	HATLS              *tls.Config
	HAAllow            []netip.Prefix
	HAAllowClientNames []string
	HAMaxConns         int
	HAMaxConnsPerIP    int
	// HAIdleTimeout closes an HA connection that read nothing this long
	// (RocketMQ haHousekeepingInterval; 0: 20 s).
	HAIdleTimeout time.Duration
	// HAReportInterval is how often a slave reports its offset at least
	// (RocketMQ haSendHeartbeatInterval; 0: 5 s). It must stay well below
	// the master's HAIdleTimeout.
	HAReportInterval time.Duration

	// MasterAPIClient is the HTTP client a slave's extensions use to call
	// the master's API (TLS, token); nil means a plain client.
	MasterAPIClient *http.Client
}

// haSecured reports whether cfg asks the transport for TLS or access
// control; haLimited whether it asks for connection limits.
func (cfg *Config) haSecured() bool {
	return cfg.HATLS != nil || len(cfg.HAAllow) > 0 || len(cfg.HAAllowClientNames) > 0
}

func (cfg *Config) haLimited() bool {
	return cfg.Role != core.Slave && (cfg.HAMaxConns > 0 || cfg.HAMaxConnsPerIP > 0)
}

// Extension adds routes and background work to a node (for example the
// metadata plugin: routes on both roles, a syncer on slaves).
type Extension interface {
	// Name names the extension's logger.
	Name() string
	// Start mounts the extension's routes and starts its background work.
	// It runs after the store and the replication core have started and
	// before the API serves.
	Start(env ExtensionEnv) error
	// Close stops the background work; it runs after the API stopped
	// serving and before the store closes.
	Close() error
}

// ExtensionEnv is what a node offers an extension.
type ExtensionEnv struct {
	Role      core.Role
	DataDir   string
	MasterAPI string // slave: the master's API base URL ("" when not given)
	// MasterAPIClient calls the master's API with the node's TLS and token
	// settings for it (slave); nil means a plain client.
	MasterAPIClient *http.Client
	API             *api.Server
	Logger          hclog.Logger // the node's root logger; components name their own sub-loggers
	Registerer      prometheus.Registerer
	// OnMasterConnect registers f to run (in its own goroutine) each time a
	// slave's HA connection to its master comes up. No-op on a master.
	OnMasterConnect func(f func())
}

// Node is one running replicator process: store, replication core, HTTP
// API, metrics.
type Node struct {
	cfg      Config
	log      hclog.Logger
	reg      *prometheus.Registry
	st       store.Store
	master   *core.Master
	slave    *core.SlaveNode
	api      *api.Server
	srv      *http.Server
	ln       net.Listener
	unlock   func()
	ready    chan struct{}
	started  []Extension
	onConn   []func()
	onConnMu sync.Mutex
	stopMon  chan struct{}
	monDone  chan struct{}
}

// New checks cfg and returns a node; Run starts it.
func New(cfg Config) (*Node, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("node: DataDir is required")
	}
	if cfg.Listen == "" {
		return nil, errors.New("node: Listen is required")
	}
	if cfg.Role == core.Slave && cfg.MasterHA == "" {
		return nil, errors.New("node: a slave needs the master's HA address")
	}
	if cfg.Registry == nil {
		return nil, errors.New("node: Registry is required")
	}
	if cfg.StorePlugin == "" {
		cfg.StorePlugin = "commitlog"
	}
	if cfg.TransportPlugin == "" {
		cfg.TransportPlugin = "tcp"
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Node{cfg: cfg, log: cfg.Logger, reg: prometheus.NewRegistry(), ready: make(chan struct{})}, nil
}

// Ready is closed once the node serves.
func (n *Node) Ready() <-chan struct{} { return n.ready }

// Addr is the bound HTTP API address, valid after Ready.
func (n *Node) Addr() string { return n.ln.Addr().String() }

// URL is the API's base URL (http:// or https://), valid after Ready.
func (n *Node) URL() string {
	if n.cfg.APITLS != nil {
		return "https://" + n.Addr()
	}
	return "http://" + n.Addr()
}

// Registry is the node's metrics registry.
func (n *Node) Registry() *prometheus.Registry { return n.reg }

// Run starts the node, serves until ctx is done, then shuts down gracefully:
// stop accepting API connections, finish in-flight requests (puts wait for
// their slaves at most the slave timeout), stop extensions, close the
// replication core (slave connections), flush and close the store. It
// returns nil after a clean shutdown.
func (n *Node) Run(ctx context.Context) (err error) {
	defer func() {
		if cerr := n.closeAll(); err == nil {
			err = cerr
		}
	}()
	if err := n.start(); err != nil {
		return err
	}
	serveErr := make(chan error, 1)
	go func() {
		if n.cfg.APITLS != nil {
			serveErr <- n.srv.ServeTLS(n.ln, "", "")
			return
		}
		serveErr <- n.srv.Serve(n.ln)
	}()
	if n.slave != nil {
		n.stopMon, n.monDone = make(chan struct{}), make(chan struct{})
		go n.monitor()
	}
	n.api.SetReady(true)
	close(n.ready)
	n.logReady()

	select {
	case <-ctx.Done():
		n.log.Info("shutting down", "reason", context.Cause(ctx))
	case err := <-serveErr:
		return fmt.Errorf("node: API server: %w", err)
	}
	n.api.Drain()
	grace := n.cfg.SlaveTimeout + ShutdownGrace
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := n.srv.Shutdown(sctx); err != nil {
		n.log.Warn("API requests still running at the end of the shutdown grace period; closing them", "grace", grace, "error", err)
		n.srv.Close()
	}
	<-serveErr
	return nil
}

func (n *Node) logReady() {
	args := []any{"role", n.cfg.Role.String(), "api", n.URL(), "data", n.cfg.DataDir,
		"api_tls", n.cfg.APITLS != nil, "api_client_certs", n.cfg.APITLS != nil && n.cfg.APITLS.ClientAuth == tls.RequireAndVerifyClientCert,
		"api_token", n.cfg.APIToken != "", "ha_tls", n.cfg.HATLS != nil}
	if n.master != nil {
		args = append(args, "ha_listen", n.master.Addr())
	} else {
		args = append(args, "master", n.cfg.MasterHA)
	}
	b := n.st.Bounds()
	args = append(args, "min_offset", b.Min, "max_offset", b.Max, "segment_size", b.SegmentSize)
	n.log.Info("ready", args...)
}

func (n *Node) start() error {
	cfg := n.cfg
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("node: data directory: %w", err)
	}
	unlock, err := lockDir(cfg.DataDir)
	if err != nil {
		return err
	}
	n.unlock = unlock

	// Listen first: a port in use is the most common start failure, and it
	// should not leave a half-started node behind.
	n.ln, err = net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("node: API listen on %s: %w", cfg.Listen, err)
	}

	if err := n.registerMetrics(); err != nil {
		return err
	}
	openStore, err := cfg.Registry.Store(cfg.StorePlugin)
	if err != nil {
		return err
	}
	newTransport, err := cfg.Registry.Transport(cfg.TransportPlugin)
	if err != nil {
		return err
	}
	// Keep n.st nil unless the store opened: a factory may return a typed
	// nil with its error, and closeAll closes whatever n.st holds.
	st, err := openStore(cfg.DataDir, pluginhost.StoreOptions{
		SegmentSize:    cfg.SegmentSize,
		SyncFlush:      cfg.SyncFlush,
		MaxMessageSize: cfg.MaxMessageSize,
		Logger:         n.log,
		Registerer:     n.reg,
	})
	if err != nil {
		return fmt.Errorf("node: opening the %s store: %w", cfg.StorePlugin, err)
	}
	n.st = st
	tr, err := newTransport(pluginhost.TransportOptions{Logger: n.log, Registerer: n.reg})
	if err != nil {
		return fmt.Errorf("node: the %s transport: %w", cfg.TransportPlugin, err)
	}
	if tr, err = n.secureTransport(tr); err != nil {
		return err
	}
	if b := n.st.Bounds(); cfg.SegmentSize > 0 && b.SegmentSize != cfg.SegmentSize {
		return fmt.Errorf("node: the commit log in %s has segments of %d bytes, not the configured %d", cfg.DataDir, b.SegmentSize, cfg.SegmentSize)
	}

	var put func(context.Context, *record.Message) (core.PutResult, error)
	if cfg.Role == core.Slave {
		n.slave, err = core.NewSlave(n.st, tr, core.SlaveConfig{
			MasterAddr:           cfg.MasterHA,
			ReconnectDelay:       cfg.ReconnectDelay,
			HousekeepingInterval: cfg.HAIdleTimeout,
			ReportInterval:       cfg.HAReportInterval,
			Logger:               n.log,
			Registerer:           n.reg,
		})
		if err != nil {
			return fmt.Errorf("node: slave: %w", err)
		}
		if err := n.slave.Start(); err != nil {
			return fmt.Errorf("node: starting the slave: %w", err)
		}
		put = n.slave.Put
	} else {
		n.master, err = core.NewMaster(n.st, tr, core.MasterConfig{
			ListenAddr:           cfg.HAListen,
			Role:                 cfg.Role,
			SyncAcks:             cfg.SyncAcks,
			SlaveTimeout:         cfg.SlaveTimeout,
			MaxLag:               cfg.MaxLag,
			HousekeepingInterval: cfg.HAIdleTimeout,
			Logger:               n.log,
			Registerer:           n.reg,
		})
		if err != nil {
			return fmt.Errorf("node: master: %w", err)
		}
		if err := n.master.Start(); err != nil {
			return fmt.Errorf("node: starting the master: %w", err)
		}
		put = n.master.Put
	}

	var storeHost netip.AddrPort
	if ap, err := netip.ParseAddrPort(n.ln.Addr().String()); err == nil {
		storeHost = ap
	}
	n.api, err = api.New(api.Config{
		Backend:      &backend{Store: n.st, put: put, status: n.status},
		Gatherer:     n.reg,
		Registerer:   n.reg,
		Logger:       n.log.Named("http"),
		MaxBodyBytes: cfg.MaxMessageSize,
		StoreHost:    storeHost,
		Version:      cfg.Version,
		Token:        cfg.APIToken,
	})
	if err != nil {
		return err
	}
	if cfg.Profiling {
		n.api.EnableProfiling()
		n.log.Info("profiling endpoints enabled", "path", "/debug/pprof/", "api_token", cfg.APIToken != "")
	}
	for _, ext := range cfg.Extensions {
		env := ExtensionEnv{
			Role:            cfg.Role,
			DataDir:         cfg.DataDir,
			MasterAPI:       cfg.MasterAPI,
			MasterAPIClient: cfg.MasterAPIClient,
			API:             n.api,
			Logger:          n.log,
			Registerer:      n.reg,
			OnMasterConnect: func(f func()) {
				n.onConnMu.Lock()
				n.onConn = append(n.onConn, f)
				n.onConnMu.Unlock()
			},
		}
		if err := ext.Start(env); err != nil {
			return fmt.Errorf("node: starting %s: %w", ext.Name(), err)
		}
		n.started = append(n.started, ext)
	}
	// Long polls wait up to api.MaxWait, sync puts up to the slave timeout.
	limits := api.DefaultServerLimits(cfg.SlaveTimeout)
	if cfg.APIMaxConns != 0 {
		limits.MaxConns = cfg.APIMaxConns
	}
	if n.ln, err = api.LimitListener(n.ln, limits.MaxConns, n.log.Named("http"), n.reg); err != nil {
		return fmt.Errorf("node: API listener: %w", err)
	}
	n.srv = n.api.HTTPServer(limits)
	if cfg.APITLS != nil {
		n.srv.TLSConfig = cfg.APITLS.Clone()
	}
	return nil
}

// secureTransport applies the HA security options and connection limits to
// the builtin tcp transport. Another transport cannot take them: with TLS or
// an allow list the node refuses to start rather than run the HA port
// unprotected; connection limits are left to that transport, with a log line.
func (n *Node) secureTransport(tr transport.Transport) (transport.Transport, error) {
	cfg := &n.cfg
	if !cfg.haSecured() && !cfg.haLimited() {
		return tr, nil
	}
	tcp, ok := tr.(*tcptransport.Transport)
	if !ok {
		if cfg.haSecured() {
			return nil, fmt.Errorf("node: HA TLS and allow lists need the builtin tcp transport, not the %q plugin", cfg.TransportPlugin)
		}
		n.log.Info("HA connection limits are applied by the builtin tcp transport only; not by this one", "transport", cfg.TransportPlugin)
		return tr, nil
	}
	o := tcp.Options()
	if cfg.Role == core.Slave {
		o.ClientTLS = cfg.HATLS
	} else {
		o.ServerTLS = cfg.HATLS
		o.Allow = cfg.HAAllow
		o.AllowClientNames = cfg.HAAllowClientNames
		o.MaxConns = cfg.HAMaxConns
		o.MaxConnsPerIP = cfg.HAMaxConnsPerIP
	}
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("node: HA transport: %w", err)
	}
	return tcptransport.New(o), nil
}

// closeAll releases whatever start acquired, in reverse order.
func (n *Node) closeAll() error {
	var errs []error
	if n.srv == nil && n.ln != nil {
		n.ln.Close()
	}
	if n.stopMon != nil {
		close(n.stopMon)
		<-n.monDone
	}
	for i := len(n.started) - 1; i >= 0; i-- {
		if err := n.started[i].Close(); err != nil {
			errs = append(errs, fmt.Errorf("node: closing %s: %w", n.started[i].Name(), err))
		}
	}
	if n.master != nil {
		if err := n.master.Close(); err != nil {
			errs = append(errs, fmt.Errorf("node: closing the master: %w", err))
		}
	}
	if n.slave != nil {
		if err := n.slave.Close(); err != nil {
			errs = append(errs, fmt.Errorf("node: closing the slave: %w", err))
		}
	}
	if n.st != nil {
		b := n.st.Bounds()
		if err := n.st.Close(); err != nil {
			errs = append(errs, fmt.Errorf("node: closing the store: %w", err))
		} else {
			n.log.Info("store closed", "max_offset", b.Max)
		}
	}
	if n.unlock != nil {
		n.unlock()
	}
	return errors.Join(errs...)
}

// MonitorInterval is how often a slave node looks at its HA connection to
// run the OnMasterConnect hooks.
const MonitorInterval = 200 * time.Millisecond

// monitor runs the OnMasterConnect hooks when the slave's connection comes up.
func (n *Node) monitor() {
	defer close(n.monDone)
	t := time.NewTicker(MonitorInterval)
	defer t.Stop()
	was := false
	var hooks sync.WaitGroup
	defer hooks.Wait()
	for {
		select {
		case <-n.stopMon:
			return
		case <-t.C:
		}
		up := n.slave.Status().Connected
		if up && !was {
			n.onConnMu.Lock()
			fs := append([]func(){}, n.onConn...)
			n.onConnMu.Unlock()
			for _, f := range fs {
				hooks.Add(1)
				go func() {
					defer hooks.Done()
					f()
				}()
			}
		}
		was = up
	}
}

// status is the role-specific part of GET /v1/status.
func (n *Node) status() api.Status {
	now := time.Now()
	if n.master != nil {
		ms := n.master.Status()
		st := api.Status{Role: ms.Role.String(), HAAddr: ms.Addr, Slaves: make([]api.SlaveStatus, 0, len(ms.Slaves))}
		for _, s := range ms.Slaves {
			ago := int64(-1)
			if !s.LastAck.IsZero() {
				ago = now.Sub(s.LastAck).Milliseconds()
			}
			st.Slaves = append(st.Slaves, api.SlaveStatus{
				Addr: s.Addr, AckOffset: s.AckOffset, LagBytes: s.LagBytes, LastAckMsAgo: ago,
				RequestOffset: s.RequestOffset, OutOfRange: s.OutOfRange,
			})
		}
		return st
	}
	ss := n.slave.Status()
	ago := int64(-1)
	if !ss.LastFrameTime.IsZero() {
		ago = now.Sub(ss.LastFrameTime).Milliseconds()
	}
	return api.Status{Role: core.Slave.String(), Master: &api.MasterLink{
		Addr: ss.MasterAddr, Connected: ss.Connected, AckSent: ss.AckSent, LastError: ss.LastError,
		SegmentError: ss.SegmentError, Reconnects: ss.Reconnects, LastFrameMsAgo: ago,
	}}
}

func (n *Node) registerMetrics() error {
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "replicator_build_info",
		Help:        "Always 1; labels carry the version, Go version and role.",
		ConstLabels: prometheus.Labels{"version": n.cfg.Version, "goversion": runtime.Version(), "role": n.cfg.Role.String()},
	})
	build.Set(1)
	bound := func(name, help string, f func(store.Bounds) int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			if n.st == nil {
				return 0
			}
			return float64(f(n.st.Bounds()))
		})
	}
	cs := []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		build,
		bound("replicator_node_max_offset_bytes", "First commit-log offset not yet written.", func(b store.Bounds) int64 { return b.Max }),
		bound("replicator_node_min_offset_bytes", "First readable commit-log offset.", func(b store.Bounds) int64 { return b.Min }),
		bound("replicator_node_flushed_offset_bytes", "Every commit-log byte below this offset is durable.", func(b store.Bounds) int64 { return b.Flushed }),
	}
	for _, c := range cs {
		if err := n.reg.Register(c); err != nil {
			return fmt.Errorf("node: registering metrics: %w", err)
		}
	}
	return nil
}

// backend adapts a store and a put function to api.Backend.
type backend struct {
	store.Store
	put    func(context.Context, *record.Message) (core.PutResult, error)
	status func() api.Status
}

func (b *backend) Put(ctx context.Context, msg *record.Message) (core.PutResult, error) {
	return b.put(ctx, msg)
}
func (b *backend) Status() api.Status { return b.status() }

var _ api.Backend = (*backend)(nil)
