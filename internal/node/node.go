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

	"github.com/replicatorhq/replicator/controller/member"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/core/epoch"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/pluginhost"
	"github.com/replicatorhq/replicator/internal/promreg"
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
	// api.DefaultMaxConns; negative: no limit), APIMaxConnsPerIP those
	// from one IP address (0: api.DefaultMaxConnsPerIP; negative: no
	// limit); at a limit the longest-idle connection is closed first.
	// APIIdleTimeout closes keep-alive connections idle this long (0:
	// api.DefaultIdleTimeout).
	APIMaxConns      int
	APIMaxConnsPerIP int
	APIIdleTimeout   time.Duration

	// HA is the HA transport's security (TLS, allow lists, connection
	// limits, transfer rate: transport.Security), applied through the
	// transport's transport.Securer capability (the builtin tcp transport
	// has it; a transport without it refuses to start with TLS or allow
	// lists). A master serves HA.ServerTLS (with ClientAuth set, slaves
	// need certificates), applies the allow lists and limits, and dials with
	// HA.ClientTLS if it becomes a slave (controller mode); a slave uses
	// HA.ClientTLS only, to dial the master. Zero fields: plain TCP, every
	// peer, no limit.
	HA transport.Security
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

	// Protocol is the HA protocol. With core.ProtocolAutoSwitch the node
	// runs a core.Replica over DATA/epochFileCheckpoint and changes role at
	// runtime (POST /v1/role); HAListen is then also a slave's listen
	// address after a promote ("" on a slave: the API port + 1), and
	// PromoteRole (AsyncMaster or SyncMaster) its replication then.
	Protocol    core.Protocol
	PromoteRole core.Role
	// BrokerID is the node's broker id (autoswitch); 0: the one stored in
	// DATA/role, or a new random one (1 to MaxGeneratedBrokerID).
	BrokerID int64
	// MaxTimeSlaveNotCatchup: a slave that has not caught up this long
	// leaves the master's in-sync set (0: core's default, 15 s).
	MaxTimeSlaveNotCatchup time.Duration
	// ReadConfirmed makes a slave serve reads only up to its confirm offset.
	ReadConfirmed bool
	// SyncFromLastFile and AsyncLearner are the slave's handshake flags.
	SyncFromLastFile, AsyncLearner bool
	// AllowDivergedRejoin lets a classic slave start on a data directory
	// whose last role was master (DATA/role).
	AllowDivergedRejoin bool

	// Controller, when set, makes the node a member of a controller-mode
	// group (controller.go, replicator node): Protocol must be autoswitch,
	// Role the replication as a master (AsyncMaster or SyncMaster),
	// HAListen a fixed port and BrokerID set; the controller assigns the
	// role and POST /v1/role answers 409.
	Controller *ControllerConfig
}

// haSecurity is what cfg asks of the HA transport: a slave dials with
// HA.ClientTLS and nothing else; a master (or a node that may become one)
// applies all of HA.
func (cfg *Config) haSecurity() transport.Security {
	if cfg.Role == core.Slave {
		return transport.Security{ClientTLS: cfg.HA.ClientTLS}
	}
	return cfg.HA
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
	// OnRoleChange registers f to run after each runtime role change
	// (autoswitch: POST /v1/role), once core has switched and before the
	// request answers; hooks run one after another in registration order,
	// on the goroutine of the change, never two changes at once. Role above
	// stays the role the node started with; f receives the new one.
	OnRoleChange func(f func(RoleChange))
}

// RoleChange is a runtime role change, as extensions see it.
type RoleChange struct {
	// Role is the new role: AsyncMaster or SyncMaster after a promote,
	// Slave after a demote.
	Role core.Role
	// MasterHA is the new master's HA address (Slave only).
	MasterHA string
	// MasterAPI is the new master's API base URL (Slave only; "" when the
	// demote did not name it).
	MasterAPI string
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
	srv      *api.Port
	ln       net.Listener
	unlock   func()
	ready    chan struct{}
	started  []Extension
	onConn   []func()
	onConnMu sync.Mutex
	hooks    sync.WaitGroup // running OnMasterConnect hooks
	// hooksClosed (under onConnMu): closeAll started; no more hooks.
	hooksClosed bool
	onRole      []func(RoleChange) // under onConnMu
	// connUp (under onConnMu): a slave connection reached TRANSFER since
	// the start or the last role change.
	connUp bool

	// The current role and master API (they change with ChangeRole), for
	// replicator_build_info and a slave's 403 answers.
	curMu        sync.Mutex
	curRole      core.Role
	curMasterAPI string

	// Role history and autoswitch (autoswitch.go).
	roleRec            RoleRecord
	hasRoleRec         bool
	brokerID           int64
	epochs             *epoch.File
	replica            *core.Replica
	roleMu             sync.Mutex // serialises role changes and DATA/role writes
	slaveOf            string     // autoswitch slave: the master's HA address
	pendingSlaveRecord bool       // DATA/role says slave once the slave reaches TRANSFER

	// Controller mode (controller.go).
	member     *member.Member
	memberStop context.CancelFunc
	memberDone chan struct{}

	// Classic slave: the master-log check (masterbehind.go).
	behindMu    sync.Mutex
	behind      string // the reason while the master's log is shorter
	behindGauge prometheus.Gauge
	stopBehind  chan struct{} // closed by closeAll
	behindDone  chan struct{}
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
	return &Node{cfg: cfg, log: cfg.Logger, reg: prometheus.NewRegistry(), ready: make(chan struct{}),
		curRole: cfg.Role, curMasterAPI: cfg.MasterAPI, behindGauge: newBehindGauge()}, nil
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
	go func() { serveErr <- n.srv.Serve(n.ln) }()
	if n.slave != nil {
		n.startBehindCheck() // masterbehind.go: a classic slave's master-log check
	}
	n.api.SetReady(true)
	close(n.ready)
	n.logReady()
	memberErr := n.runMember() // controller.go; nil channel otherwise

	select {
	case <-ctx.Done():
		n.log.Info("shutting down", "reason", context.Cause(ctx))
	case err := <-serveErr:
		n.stopMember()
		return fmt.Errorf("node: API server: %w", err)
	case err := <-memberErr:
		n.stopMember()
		n.srv.Close()
		<-serveErr
		return fmt.Errorf("node: controller member: %w", err)
	}
	// A controller-mode member goes first: a master fences itself and
	// revokes its lease, and the group elects another master at once.
	n.stopMember()
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
	role := n.cfg.Role.String()
	if n.member != nil {
		role = "none (the controller decides)"
	}
	args := []any{"role", role, "api", n.URL(), "data", n.cfg.DataDir,
		"api_tls", n.cfg.APITLS != nil, "api_client_certs", n.cfg.APITLS != nil && n.cfg.APITLS.ClientAuth == tls.RequireAndVerifyClientCert,
		"api_token", n.cfg.APIToken != "", "ha_tls", n.cfg.HA.ServerTLS != nil || n.cfg.HA.ClientTLS != nil}
	args = append(args, "protocol", n.cfg.Protocol.String())
	switch {
	case n.replica != nil:
		last, _ := n.epochs.Last()
		args = append(args, "broker_id", n.brokerID, "epoch", last.Epoch, "epoch_entries", n.epochs.Len())
		if m := n.replica.Master(); m != nil {
			args = append(args, "ha_listen", m.Addr())
		} else if n.member != nil {
			args = append(args, "group", n.cfg.Controller.Group, "replication", n.cfg.Role.String(), "ha_listen", n.cfg.HAListen)
		} else {
			args = append(args, "master", n.cfg.MasterHA, "read_confirmed", n.cfg.ReadConfirmed)
		}
	case n.master != nil:
		args = append(args, "ha_listen", n.master.Addr())
	default:
		args = append(args, "master", n.cfg.MasterHA)
	}
	b := n.st.Bounds()
	args = append(args, "min_offset", b.Min, "max_offset", b.Max, "segment_size", b.SegmentSize)
	n.log.Info("ready", args...)
}

func (n *Node) start() error {
	if err := n.lockAndListen(); err != nil {
		return err
	}
	if err := n.registerMetrics(); err != nil {
		return err
	}
	tr, err := n.openPlugins()
	if err != nil {
		return err
	}
	if err := n.checkRoleHistory(); err != nil {
		return err
	}
	put, err := n.startCore(tr)
	if err != nil {
		return err
	}
	if err := n.newAPI(put); err != nil {
		return err
	}
	if err := n.startExtensions(); err != nil {
		return err
	}
	return n.newHTTPServer()
}

// lockAndListen creates and locks the data directory, then listens on the
// API address: a port in use is the most common start failure, and it
// should not leave a half-started node behind.
func (n *Node) lockAndListen() error {
	cfg := &n.cfg
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("node: data directory: %w", err)
	}
	unlock, err := lockDir(cfg.DataDir)
	if err != nil {
		return err
	}
	n.unlock = unlock
	if n.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return fmt.Errorf("node: API listen on %s: %w", cfg.Listen, err)
	}
	return nil
}

// openPlugins opens the store and the transport of the configured plugins
// and checks the store's segment size against the configured one.
func (n *Node) openPlugins() (transport.Transport, error) {
	cfg := &n.cfg
	openStore, err := cfg.Registry.Store(cfg.StorePlugin)
	if err != nil {
		return nil, err
	}
	newTransport, err := cfg.Registry.Transport(cfg.TransportPlugin)
	if err != nil {
		return nil, err
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
		return nil, fmt.Errorf("node: opening the %s store: %w", cfg.StorePlugin, err)
	}
	n.st = st
	tr, err := newTransport(pluginhost.TransportOptions{Logger: n.log, Registerer: n.reg})
	if err != nil {
		return nil, fmt.Errorf("node: the %s transport: %w", cfg.TransportPlugin, err)
	}
	if tr, err = n.secureTransport(tr); err != nil {
		return nil, err
	}
	if b := n.st.Bounds(); cfg.SegmentSize > 0 && b.SegmentSize != cfg.SegmentSize {
		return nil, fmt.Errorf("node: the commit log in %s has segments of %d bytes, not the configured %d", cfg.DataDir, b.SegmentSize, cfg.SegmentSize)
	}
	return tr, nil
}

// putFunc is the put of the node's replication core.
type putFunc func(context.Context, *record.Message) (core.PutResult, error)

// startCore starts the replication core of the configured mode: a
// controller-mode member, an autoswitch replica, or a classic slave or
// master. It returns the put the API calls.
func (n *Node) startCore(tr transport.Transport) (putFunc, error) {
	switch {
	case n.cfg.Controller != nil:
		if err := n.startMember(tr); err != nil {
			return nil, err
		}
		return n.memberPut, nil
	case n.cfg.Protocol == core.ProtocolAutoSwitch:
		if err := n.startReplica(tr); err != nil {
			return nil, err
		}
		return n.replica.Put, nil
	case n.cfg.Role == core.Slave:
		return n.startClassicSlave(tr)
	}
	return n.startClassicMaster(tr)
}

// startClassicSlave starts a classic slave; its connection to the master
// pushes the OnMasterConnect hooks (core.SlaveNode.OnConnect).
func (n *Node) startClassicSlave(tr transport.Transport) (putFunc, error) {
	cfg := &n.cfg
	s, err := core.NewSlave(n.st, tr, core.SlaveConfig{
		MasterAddr:           cfg.MasterHA,
		ReconnectDelay:       cfg.ReconnectDelay,
		HousekeepingInterval: cfg.HAIdleTimeout,
		ReportInterval:       cfg.HAReportInterval,
		Logger:               n.log,
		Registerer:           n.reg,
	})
	if err != nil {
		return nil, fmt.Errorf("node: slave: %w", err)
	}
	n.slave = s
	s.OnConnect(n.runConnectHooks)
	if err := s.Start(); err != nil {
		return nil, fmt.Errorf("node: starting the slave: %w", err)
	}
	return s.Put, n.recordRole(RoleSlave)
}

// startClassicMaster starts a classic master on the HA listen address.
func (n *Node) startClassicMaster(tr transport.Transport) (putFunc, error) {
	cfg := &n.cfg
	m, err := core.NewMaster(n.st, tr, core.MasterConfig{
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
		return nil, fmt.Errorf("node: master: %w", err)
	}
	n.master = m
	if err := m.Start(); err != nil {
		return nil, fmt.Errorf("node: starting the master: %w", err)
	}
	return m.Put, n.recordRole(RoleMaster)
}

// newAPI builds the HTTP API over the store and put.
func (n *Node) newAPI(put putFunc) error {
	cfg := &n.cfg
	var storeHost netip.AddrPort
	if ap, err := netip.ParseAddrPort(n.ln.Addr().String()); err == nil {
		storeHost = ap
	}
	acfg := api.Config{
		Backend:      &backend{Store: n.st, put: put, putBatch: n.batchPut(), status: n.status},
		Gatherer:     n.reg,
		Registerer:   n.reg,
		Logger:       n.log.Named("http"),
		MaxBodyBytes: cfg.MaxMessageSize,
		StoreHost:    storeHost,
		Version:      cfg.Version,
		Token:        cfg.APIToken,
		// A slave's 403 to a put names its master's API (--master-api).
		// It follows runtime role changes (ChangeRole).
		MasterAPI: n.currentMasterAPI,
	}
	if n.replica != nil {
		acfg.Roles = n
		acfg.PutOrigin = n.putOrigin
		if cfg.ReadConfirmed {
			acfg.ReadLimit = n.readLimit
		}
	}
	var err error
	if n.api, err = api.New(acfg); err != nil {
		return err
	}
	if cfg.Profiling {
		n.api.EnableProfiling()
		n.log.Info("profiling endpoints enabled", "path", "/debug/pprof/", "api_token", cfg.APIToken != "")
	}
	return nil
}

// startExtensions starts the configured extensions in order; closeAll
// closes those that started.
func (n *Node) startExtensions() error {
	for _, ext := range n.cfg.Extensions {
		if err := ext.Start(n.extensionEnv()); err != nil {
			return fmt.Errorf("node: starting %s: %w", ext.Name(), err)
		}
		n.started = append(n.started, ext)
	}
	return nil
}

// extensionEnv is what an extension starts with.
func (n *Node) extensionEnv() ExtensionEnv {
	return ExtensionEnv{
		Role:            n.startRole(),
		DataDir:         n.cfg.DataDir,
		MasterAPI:       n.cfg.MasterAPI,
		MasterAPIClient: n.cfg.MasterAPIClient,
		API:             n.api,
		Logger:          n.log,
		Registerer:      n.reg,
		OnMasterConnect: n.onMasterConnect,
		OnRoleChange: func(f func(RoleChange)) {
			n.onConnMu.Lock()
			n.onRole = append(n.onRole, f)
			n.onConnMu.Unlock()
		},
	}
}

// onMasterConnect registers an OnMasterConnect hook.
func (n *Node) onMasterConnect(f func()) {
	n.onConnMu.Lock()
	n.onConn = append(n.onConn, f)
	up := n.connUp
	n.onConnMu.Unlock()
	if up {
		// The slave connected before this extension started: tell it now
		// rather than at the next connection.
		n.goTracked(f)
	}
}

// newHTTPServer bounds the API listener and builds the API port (the HTTP
// server, and gRPC's own transport for the producer stream): long polls
// wait up to api.MaxWait, sync puts up to the slave timeout.
func (n *Node) newHTTPServer() error {
	cfg := &n.cfg
	limits := api.DefaultServerLimits(cfg.SlaveTimeout)
	if cfg.APIMaxConns != 0 {
		limits.MaxConns = cfg.APIMaxConns
	}
	if cfg.APIMaxConnsPerIP != 0 {
		limits.MaxConnsPerIP = cfg.APIMaxConnsPerIP
	}
	if cfg.APIIdleTimeout > 0 {
		limits.IdleTimeout = cfg.APIIdleTimeout
	}
	var err error
	if n.ln, err = api.LimitListenerPerIP(n.ln, limits.MaxConns, limits.MaxConnsPerIP, n.log.Named("http"), n.reg); err != nil {
		return fmt.Errorf("node: API listener: %w", err)
	}
	if n.srv, err = n.api.NewPort(limits, cfg.APITLS); err != nil {
		return fmt.Errorf("node: API server: %w", err)
	}
	return nil
}

// secureTransport applies the HA security options and connection limits
// through the transport's transport.Securer capability, whatever plugin
// provides it. A transport without that capability cannot take them: with
// TLS or an allow list the node refuses to start rather than run the HA
// port unprotected; connection limits are left to that transport, with a
// log line.
func (n *Node) secureTransport(tr transport.Transport) (transport.Transport, error) {
	cfg := &n.cfg
	sec := cfg.haSecurity()
	if !sec.Protected() && !sec.Limited() {
		return tr, nil
	}
	securer, ok := tr.(transport.Securer)
	if !ok {
		if sec.Protected() {
			return nil, fmt.Errorf("node: HA TLS and allow lists need a transport that applies them (transport.Securer), which the %q plugin is not", cfg.TransportPlugin)
		}
		n.log.Info("HA connection limits are left to the transport, which does not take them", "transport", cfg.TransportPlugin)
		return tr, nil
	}
	secured, err := securer.Secure(sec)
	if err != nil {
		return nil, fmt.Errorf("node: HA transport: %w", err)
	}
	return secured, nil
}

// closeAll releases whatever start acquired, in reverse order.
func (n *Node) closeAll() error {
	var errs []error
	if n.srv == nil && n.ln != nil {
		n.ln.Close()
	}
	if n.stopBehind != nil {
		close(n.stopBehind)
		<-n.behindDone
	}
	// No hook starts after this, and the running ones end before the
	// extensions close.
	n.onConnMu.Lock()
	n.hooksClosed = true
	n.onConnMu.Unlock()
	n.hooks.Wait()
	for i := len(n.started) - 1; i >= 0; i-- {
		if err := n.started[i].Close(); err != nil {
			errs = append(errs, fmt.Errorf("node: closing %s: %w", n.started[i].Name(), err))
		}
	}
	if n.replica != nil {
		if err := n.replica.Close(); err != nil {
			errs = append(errs, fmt.Errorf("node: closing the replica: %w", err))
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

// runConnectHooks runs each OnMasterConnect hook in its own goroutine;
// closeAll waits for them. Core pushes it (SlaveNode.OnConnect,
// Replica.OnConnect) each time the slave's connection reaches TRANSFER.
func (n *Node) runConnectHooks() {
	n.onConnMu.Lock()
	fs := append([]func(){}, n.onConn...)
	n.connUp = true
	n.onConnMu.Unlock()
	for _, f := range fs {
		n.goTracked(f)
	}
}

// goTracked runs f in a goroutine closeAll waits for; after closeAll
// started, it does not run f.
func (n *Node) goTracked(f func()) {
	n.onConnMu.Lock()
	defer n.onConnMu.Unlock()
	if n.hooksClosed {
		return
	}
	n.hooks.Add(1)
	go func() {
		defer n.hooks.Done()
		f()
	}()
}

// status is the role-specific part of GET /v1/status.
func (n *Node) status() api.Status {
	now := time.Now()
	var st api.Status
	switch {
	case n.member != nil:
		return n.controllerStatus(now)
	case n.replica != nil:
		return n.replicaStatus(now)
	case n.master != nil:
		st = masterStatus(n.master.Status(), now)
	default:
		st = slaveStatus(n.slave.Status(), now)
		st.Master.Diverged = n.diverged()
	}
	st.Protocol = core.ProtocolClassic.String()
	return st
}

func masterStatus(ms core.MasterStatus, now time.Time) api.Status {
	st := api.Status{Role: ms.Role.String(), HAAddr: ms.Addr, Slaves: make([]api.SlaveStatus, 0, len(ms.Slaves))}
	for _, s := range ms.Slaves {
		ago := int64(-1)
		if !s.LastAck.IsZero() {
			ago = now.Sub(s.LastAck).Milliseconds()
		}
		ss := api.SlaveStatus{
			Addr: s.Addr, AckOffset: s.AckOffset, LagBytes: s.LagBytes, LastAckMsAgo: ago,
			RequestOffset: s.RequestOffset, OutOfRange: s.OutOfRange,
		}
		if ms.Protocol == core.ProtocolAutoSwitch {
			ss.BrokerID, ss.HandshakeState, ss.InSync = s.BrokerID, s.HAState, s.InSync
		}
		st.Slaves = append(st.Slaves, ss)
	}
	return st
}

func slaveStatus(ss core.SlaveStatus, now time.Time) api.Status {
	ago := int64(-1)
	if !ss.LastFrameTime.IsZero() {
		ago = now.Sub(ss.LastFrameTime).Milliseconds()
	}
	link := &api.MasterLink{
		Addr: ss.MasterAddr, Connected: ss.Connected, AckSent: ss.AckSent, LastError: ss.LastError,
		SegmentError: ss.SegmentError, Reconnects: ss.Reconnects, LastFrameMsAgo: ago,
	}
	if ss.Protocol == core.ProtocolAutoSwitch {
		link.HandshakeState, link.Unhealthy = ss.HAState, ss.Unhealthy
		if t := ss.Truncated; t != nil {
			link.LastTruncation = &api.Truncation{From: t.From, To: t.To, Bytes: t.Bytes, Records: int64(t.Records), MsAgo: now.Sub(t.Time).Milliseconds()}
		}
	}
	return api.Status{Role: core.Slave.String(), Master: link}
}

func (n *Node) registerMetrics() error {
	build := &buildInfo{
		desc: prometheus.NewDesc("replicator_build_info", "Always 1; labels carry the version, Go version and the current role.",
			[]string{"role"}, prometheus.Labels{"version": n.cfg.Version, "goversion": runtime.Version()}),
		role: n.currentRole,
	}
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
		n.behindGauge,
	}
	for _, c := range cs {
		if _, err := promreg.Register(n.reg, c); err != nil {
			return fmt.Errorf("node: registering metrics: %w", err)
		}
	}
	return nil
}

// backend adapts a store and the put and batch put of the node's
// replication core to api.Backend.
type backend struct {
	store.Store
	put      putFunc
	putBatch func(context.Context, []*record.Message) []core.BatchPut
	status   func() api.Status
}

func (b *backend) Put(ctx context.Context, msg *record.Message) (core.PutResult, error) {
	return b.put(ctx, msg)
}

func (b *backend) PutBatch(ctx context.Context, msgs []*record.Message) []core.BatchPut {
	return b.putBatch(ctx, msgs)
}

// batchPut is the batch put of the node's replication core, the API's
// PutBatch: the member's (memberPutBatch), the autoswitch replica's or
// the classic master's, each one append run and one replica wait per
// batch; a classic slave refuses each message as its Put does (at once).
func (n *Node) batchPut() func(context.Context, []*record.Message) []core.BatchPut {
	switch {
	case n.member != nil:
		return n.memberPutBatch
	case n.replica != nil:
		return n.replica.PutBatch
	case n.master != nil:
		return n.master.PutBatch
	}
	s := n.slave
	return func(ctx context.Context, msgs []*record.Message) []core.BatchPut {
		out := make([]core.BatchPut, len(msgs))
		for i, msg := range msgs {
			out[i].PutResult, out[i].Err = s.Put(ctx, msg)
		}
		return out
	}
}

// memberPutBatch is memberPut for a batch: Member.PutBatch, whose
// core.ErrNotMaster refusals become notMasterPutErr's errors (the
// member's status read once for the batch).
func (n *Node) memberPutBatch(ctx context.Context, msgs []*record.Message) []core.BatchPut {
	out := n.member.PutBatch(ctx, msgs)
	var st *member.Status
	for i := range out {
		err := out[i].Err
		if err == nil || errors.Is(err, core.ErrFenced) || !errors.Is(err, core.ErrNotMaster) {
			continue
		}
		if st == nil {
			s := n.member.Status()
			st = &s
		}
		out[i].Err = notMasterPutErr(*st, err)
	}
	return out
}
func (b *backend) Status() api.Status { return b.status() }

var _ api.Backend = (*backend)(nil)

// buildInfo is replicator_build_info: its role label is the node's current
// role, which a runtime role change moves.
type buildInfo struct {
	desc *prometheus.Desc
	role func() core.Role
}

func (b *buildInfo) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }

func (b *buildInfo) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(b.desc, prometheus.GaugeValue, 1, b.role().String())
}

// currentRole is the node's role now: the configured one until a runtime
// role change.
func (n *Node) currentRole() core.Role {
	n.curMu.Lock()
	defer n.curMu.Unlock()
	return n.curRole
}

// currentMasterAPI is the master's API base URL a slave names in its 403
// answers ("" on a master, or when unknown).
func (n *Node) currentMasterAPI() string {
	if n.member != nil {
		// The group's state in etcd: the master's registered API.
		st := n.member.Status()
		if st.Master == st.BrokerID {
			return ""
		}
		return st.MasterAPI
	}
	n.curMu.Lock()
	defer n.curMu.Unlock()
	if n.curRole != core.Slave {
		return ""
	}
	return n.curMasterAPI
}
