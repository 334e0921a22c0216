package pluginhost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/internal/promreg"
	"github.com/replicatorhq/replicator/sdk/meta"
	"github.com/replicatorhq/replicator/sdk/metaplugin"
	"github.com/replicatorhq/replicator/sdk/plugin"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/sdk/storeplugin"
	"github.com/replicatorhq/replicator/sdk/transportplugin"
	"github.com/replicatorhq/replicator/transport"
)

// Entry describes one plugin the host can use.
type Entry struct {
	Kind    string
	Name    string
	Version string
	Path    string // "" for a builtin
	Builtin bool
}

// HostOptions configure external plugin loading.
type HostOptions struct {
	// Checksums pins binaries by file name (see ChecksumFile). nil: the
	// pin file in the directory, if any; an empty non-nil map pins nothing.
	Checksums map[string][]byte
	// AutoMTLS puts the plugins' sockets under mutual TLS.
	AutoMTLS bool
	// BuiltinVersion is reported for builtin plugins (the binary's version).
	BuiltinVersion string
	// Store tunes the host side of external stores. Its FrameAppends is
	// the host's to set: on unless the store is opened with SyncFlush
	// (a framed Append is answered before the plugin holds the record,
	// which only a store that does not wait for a flush may do).
	Store storeplugin.ClientConfig
	// OnCrash is called once per plugin process that exits on its own (after
	// the crash is logged and counted). The daemon shuts down cleanly.
	OnCrash func(Entry, error)
	// Transport tunes the host side of external transports.
	Transport transportplugin.ClientConfig
	// MaxRestarts bounds how many times in a row a crashed metadata plugin
	// is restarted without staying up for RestartStableAfter (0 = 5;
	// negative: never restart). Past it, the crash goes to OnCrash.
	MaxRestarts int
	// RestartBackoff is the wait before the first restart attempt; it
	// doubles with each further attempt in a row, up to 10s (0 = 200ms).
	RestartBackoff time.Duration
	// RestartStableAfter is how long a restarted plugin must run for its
	// next crash to count as a first one again (0 = 1 minute).
	RestartStableAfter time.Duration
	// LaunchOptions.StartTimeout, for tests; 0 = 10s.
	StartTimeout time.Duration
	Logger       hclog.Logger          // nil: no logs
	Registerer   prometheus.Registerer // nil: no metrics
}

// Host loads external plugins from a directory into a Registry, where they
// override builtins of the same name, and owns their processes.
type Host struct {
	reg  *Registry
	opts HostOptions
	log  hclog.Logger
	done chan struct{} // closed by Close: restart loops stop

	metricsMu  sync.Mutex
	crashes    *prometheus.CounterVec // under metricsMu
	restarts   *prometheus.CounterVec // under metricsMu
	registered bool                   // under metricsMu: the counters are the first registry's
	wg         sync.WaitGroup

	mu sync.Mutex
	// supervised maps a process to what to do when it crashes instead of
	// OnCrash (restarting a metadata plugin).
	supervised map[*Process]func(*Process)
	external   map[string]Entry // kind/name -> entry
	failed     []error
	procs      map[*Process]struct{}
	dead       map[*Process]struct{} // crashed, not yet released
	closed     bool
}

// NewHost returns a host over reg (which holds the builtins).
func NewHost(reg *Registry, opts HostOptions) (*Host, error) {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	h := &Host{
		reg:      reg,
		opts:     opts,
		log:      opts.Logger,
		external: map[string]Entry{},
		procs:    map[*Process]struct{}{},
		dead:     map[*Process]struct{}{},
		done:     make(chan struct{}),
		crashes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "replicator_plugin_crashes_total",
			Help: "External plugin processes that exited without being asked to.",
		}, []string{"kind", "name"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "replicator_plugin_restarts_total",
			Help: "Crashed external plugins the host restarted (metadata plugins only).",
		}, []string{"kind", "name"}),
		supervised: map[*Process]func(*Process){},
	}
	if h.opts.MaxRestarts == 0 {
		h.opts.MaxRestarts = 5
	}
	if h.opts.RestartBackoff <= 0 {
		h.opts.RestartBackoff = 200 * time.Millisecond
	}
	if h.opts.RestartStableAfter <= 0 {
		h.opts.RestartStableAfter = time.Minute
	}
	if err := h.register(opts.Registerer); err != nil {
		return nil, err
	}
	return h, nil
}

// register adds the host's metrics to r (nil: none) with the tree's one
// policy (internal/promreg): counters already registered on r (by this
// host, or by another host on the same registry) are reused, so every host
// counts into the series r exposes. The host counts into the counters of
// the first registry it is registered on; later registries get the same
// counters (or keep their own, if another host put them there first).
func (h *Host) register(r prometheus.Registerer) error {
	if r == nil {
		return nil
	}
	h.metricsMu.Lock()
	defer h.metricsMu.Unlock()
	crashes, err := promreg.Register(r, h.crashes)
	if err != nil {
		return fmt.Errorf("pluginhost: metrics: %w", err)
	}
	restarts, err := promreg.Register(r, h.restarts)
	if err != nil {
		return fmt.Errorf("pluginhost: metrics: %w", err)
	}
	if !h.registered {
		h.crashes, h.restarts, h.registered = crashes, restarts, true
	}
	return nil
}

// RegisterMetrics adds the host's metrics (plugin crashes and restarts) to
// r; registering on the same registry twice is fine.
func (h *Host) RegisterMetrics(r prometheus.Registerer) error { return h.register(r) }

// LoadDir discovers the plugins in dir, starts each once to check it
// (handshake, protocol version, checksum, Describe) and registers the good
// ones, overriding builtins of the same name. A bad plugin is logged with
// its path and reported in the returned error (errors.Join of one error per
// plugin, each wrapping ErrIncompatible); it does not stop the others.
func (h *Host) LoadDir(dir string) error {
	found, skipped, err := Discover(dir)
	if err != nil {
		return err
	}
	for _, s := range skipped {
		h.log.Debug("skipping a file that is not a plugin executable named replicator-<kind>-<name>", "file", filepath.Join(dir, s))
	}
	sums := h.opts.Checksums
	if sums == nil {
		p := filepath.Join(dir, ChecksumFile)
		if _, err := os.Stat(p); err == nil {
			if sums, err = ReadChecksums(p); err != nil {
				return err
			}
			h.log.Info("plugin binaries are pinned", "checksums", p)
		}
	}
	var errs []error
	for _, c := range found {
		var sum []byte
		if sums != nil {
			if sum = sums[filepath.Base(c.Path)]; sum == nil {
				err := fmt.Errorf("%w: %s: not listed in the checksum file", ErrIncompatible, c.Path)
				h.log.Error("plugin refused", "path", c.Path, "error", err)
				errs = append(errs, err)
				continue
			}
		}
		p, err := Launch(c, h.launchOptions(sum))
		if err != nil {
			h.log.Error("plugin refused", "path", c.Path, "error", err)
			errs = append(errs, err)
			continue
		}
		info := p.Info
		p.Kill()
		e := Entry{Kind: c.Kind, Name: c.Name, Version: info.Version, Path: c.Path}
		h.mu.Lock()
		h.external[c.Kind+"/"+c.Name] = e
		h.mu.Unlock()
		switch c.Kind {
		case plugin.KindStore:
			h.reg.RegisterStore(c.Name, h.storeFactory(c, sum))
		case plugin.KindTransport:
			h.reg.RegisterTransport(c.Name, h.transportFactory(c, sum))
		case plugin.KindMetadata:
			h.reg.RegisterMetadata(c.Name, h.metadataFactory(loaded{c, sum}))
		}
		h.log.Info("external plugin loaded", "kind", c.Kind, "name", c.Name, "version", info.Version, "path", c.Path)
	}
	h.mu.Lock()
	h.failed = append(h.failed, errs...)
	h.mu.Unlock()
	return errors.Join(errs...)
}

func (h *Host) launchOptions(sum []byte) LaunchOptions {
	return LaunchOptions{
		Checksum:     sum,
		AutoMTLS:     h.opts.AutoMTLS,
		StartTimeout: h.opts.StartTimeout,
		Logger:       h.log.Named("plugin"),
		OnExit:       h.crashed,
	}
}

// crashed handles a plugin process that exited on its own: it is logged
// and counted, then restarted if it is supervised (a metadata plugin), else
// reported to OnCrash.
func (h *Host) crashed(p *Process) {
	h.CrashCounter().WithLabelValues(p.Cand.Kind, p.Cand.Name).Inc()
	h.log.Error("plugin crashed", "kind", p.Cand.Kind, "name", p.Cand.Name, "path", p.Cand.Path, "pid", p.pid)
	h.mu.Lock()
	delete(h.procs, p)
	h.dead[p] = struct{}{} // its go-plugin client is released by Close or a restart
	restart := h.supervised[p]
	delete(h.supervised, p)
	h.mu.Unlock()
	if restart != nil {
		restart(p)
		return
	}
	h.giveUp(p, nil)
}

// giveUp reports a crash the host does not recover from to OnCrash.
func (h *Host) giveUp(p *Process, cause error) {
	err := fmt.Errorf("pluginhost: %s plugin %q (%s, pid %d) exited unexpectedly: %w", p.Cand.Kind, p.Cand.Name, p.Cand.Path, p.pid, plugin.ErrPluginShutdown)
	if cause != nil {
		err = fmt.Errorf("%w; restarting it failed: %w", err, cause)
	}
	if h.opts.OnCrash != nil {
		h.opts.OnCrash(Entry{Kind: p.Cand.Kind, Name: p.Cand.Name, Version: p.Info.Version, Path: p.Cand.Path}, err)
	}
}

// supervise makes a crash of p call restart (from the process monitor's
// goroutine) instead of OnCrash.
func (h *Host) supervise(p *Process, restart func(*Process)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.supervised[p] = restart
}

// Start launches a plugin process owned by the host (killed by Close).
func (h *Host) Start(c Candidate, sum []byte) (*Process, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, fmt.Errorf("pluginhost: host is closed")
	}
	h.mu.Unlock()
	p, err := Launch(c, h.launchOptions(sum))
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		p.Kill()
		return nil, fmt.Errorf("pluginhost: host is closed")
	}
	h.procs[p] = struct{}{}
	return p, nil
}

func (h *Host) release(p *Process) {
	h.mu.Lock()
	delete(h.procs, p)
	delete(h.dead, p)
	delete(h.supervised, p)
	h.mu.Unlock()
	p.Kill()
}

// transportFactory opens an external transport: one plugin process per
// transport. The plugin listens, accepts and dials; the connections are
// handed to the host as descriptors, so the replicated bytes stay in the
// host. A crash of the process goes to OnCrash (the daemon stops): the
// plugin holds the master's listening socket and its connection policy,
// which a restart could not restore as they were; connections already
// handed over keep working until the node stops.
func (h *Host) transportFactory(c Candidate, sum []byte) TransportFactory {
	return func(opts TransportOptions) (transport.Transport, error) {
		if err := h.register(opts.Registerer); err != nil {
			return nil, err
		}
		cfg := h.opts.Transport
		if opts.Logger != nil {
			cfg.Logger = opts.Logger
		}
		cl, p, err := openPlugin(h, c, sum, func(ctx context.Context, conn *transportplugin.Conn) (*transportplugin.Client, error) {
			return conn.Open(ctx, transportplugin.OpenRequest{Options: opts.Options}, cfg)
		})
		if err != nil {
			return nil, err
		}
		return &externalTransport{Client: cl, owned: owned{h, p}}, nil
	}
}

// openTimeout bounds a plugin's Open call.
const openTimeout = 30 * time.Second

// openPlugin is how every kind's external plugin starts: launch a process
// for c, dispense the kind's connection (Conn, the kind's go-plugin client)
// and open it with open, within openTimeout. A failure at any step stops
// the process; on success the caller owns it (release stops it).
func openPlugin[Conn, Client any](h *Host, c Candidate, sum []byte, open func(context.Context, Conn) (Client, error)) (Client, *Process, error) {
	var none Client
	p, err := h.Start(c, sum)
	if err != nil {
		return none, nil, err
	}
	raw, err := p.Dispense()
	if err != nil {
		h.release(p)
		return none, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	cl, err := open(ctx, raw.(Conn))
	if err != nil {
		h.release(p)
		return none, nil, err
	}
	return cl, p, nil
}

// owned is the process of one external transport or store, which its
// Close stops (the host's Close does it otherwise).
type owned struct {
	h *Host
	p *Process
}

// stop stops the process and returns err, the Close error of what it served.
func (o owned) stop(err error) error {
	o.h.release(o.p)
	return err
}

// externalTransport is an external transport whose Close also stops its
// process.
type externalTransport struct {
	*transportplugin.Client
	owned
}

func (t *externalTransport) Close() error { return t.stop(t.Client.Close()) }

// storeFactory opens an external store: one plugin process per store.
func (h *Host) storeFactory(c Candidate, sum []byte) StoreFactory {
	return func(dir string, opts StoreOptions) (store.Store, error) {
		if err := h.register(opts.Registerer); err != nil {
			return nil, err
		}
		cfg := h.opts.Store
		// A framed Append is answered before the plugin holds the record:
		// only when the store's Append would not wait for a flush either.
		cfg.FrameAppends = !opts.SyncFlush
		if opts.Logger != nil {
			cfg.Logger = opts.Logger
		}
		req := storeplugin.OpenRequest{
			Dir:         dir,
			SegmentSize: opts.SegmentSize,
			Options: map[string]string{
				"sync_flush":       strconv.FormatBool(opts.SyncFlush),
				"max_message_size": strconv.FormatInt(RecordLimit(opts.MaxMessageSize), 10),
			},
		}
		cl, p, err := openPlugin(h, c, sum, func(ctx context.Context, conn *storeplugin.Conn) (*storeplugin.Client, error) {
			return conn.Open(ctx, req, cfg)
		})
		if err != nil {
			return nil, err
		}
		return &externalStore{Client: cl, owned: owned{h, p}}, nil
	}
}

// externalStore is an external store whose Close also stops its process.
type externalStore struct {
	*storeplugin.Client
	owned
}

func (s *externalStore) Close() error { return s.stop(s.Client.Close()) }

// Entries lists every plugin the registry offers, builtins and externals,
// sorted by kind and name; an external plugin replaces the builtin of its
// name in the list.
func (h *Host) Entries() []Entry {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[string]Entry{}
	for _, n := range h.reg.StoreNames() {
		seen[plugin.KindStore+"/"+n] = Entry{Kind: plugin.KindStore, Name: n, Version: h.opts.BuiltinVersion, Builtin: true}
	}
	for _, n := range h.reg.MetadataNames() {
		seen[plugin.KindMetadata+"/"+n] = Entry{Kind: plugin.KindMetadata, Name: n, Version: h.opts.BuiltinVersion, Builtin: true}
	}
	for _, n := range h.reg.TransportNames() {
		seen[plugin.KindTransport+"/"+n] = Entry{Kind: plugin.KindTransport, Name: n, Version: h.opts.BuiltinVersion, Builtin: true}
	}
	for k, e := range h.external {
		seen[k] = e
	}
	out := make([]Entry, 0, len(seen))
	for _, e := range seen {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Failed returns the load errors, one per refused plugin.
func (h *Host) Failed() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]error(nil), h.failed...)
}

// Close stops restarting plugins and kills every plugin process the host
// started. Idempotent.
func (h *Host) Close() {
	h.mu.Lock()
	if !h.closed {
		close(h.done)
	}
	h.closed = true
	procs, dead := h.procs, h.dead
	h.procs, h.dead = map[*Process]struct{}{}, map[*Process]struct{}{}
	h.mu.Unlock()
	for p := range procs {
		p.Kill()
	}
	for p := range dead {
		p.Kill()
	}
	h.wg.Wait()
}

// Processes lists the plugin processes the host runs.
func (h *Host) Processes() []*Process {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Process, 0, len(h.procs))
	for p := range h.procs {
		out = append(out, p)
	}
	return out
}

// CrashCounter is replicator_plugin_crashes_total{kind,name}.
func (h *Host) CrashCounter() *prometheus.CounterVec {
	h.metricsMu.Lock()
	defer h.metricsMu.Unlock()
	return h.crashes
}

// RestartCounter is replicator_plugin_restarts_total{kind,name}.
func (h *Host) RestartCounter() *prometheus.CounterVec {
	h.metricsMu.Lock()
	defer h.metricsMu.Unlock()
	return h.restarts
}

// loaded is a plugin binary that passed LoadDir's checks.
type loaded struct {
	c   Candidate
	sum []byte
}

// metadataFactory opens the external metadata plugin l, one process per
// store; the store's Close stops it. A crash of the process is restarted
// (see externalMeta). The plugin gets the directory and CreateDefaults; it
// applies its own limits.
func (h *Host) metadataFactory(l loaded) MetadataFactory {
	return func(dir string, opts MetadataOptions) (meta.Store, error) {
		m := &externalMeta{h: h, l: l, req: metaplugin.OpenRequest{Dir: dir, CreateDefaults: opts.CreateDefaults}, stop: make(chan struct{})}
		if err := m.start(); err != nil {
			return nil, fmt.Errorf("metadata plugin %q: %w", l.c.Name, err)
		}
		h.log.Info("metadata documents are served by the external plugin", "name", l.c.Name, "path", l.c.Path)
		return m, nil
	}
}

// externalMeta is an external metadata store that survives crashes of its
// plugin process. The host keeps nothing of the plugin's state but its
// OpenRequest (the documents live on disk, or wherever the plugin keeps
// them), so a new process opened the same way serves the same store: the
// host restarts it with backoff. Calls made while the process is down fail
// with plugin.ErrPluginShutdown (a slave's syncer retries at its next tick;
// the API answers 503). Close stops its process.
type externalMeta struct {
	h    *Host
	l    loaded
	req  metaplugin.OpenRequest
	stop chan struct{} // closed by Close
	wg   sync.WaitGroup

	mu       sync.Mutex
	cl       *metaplugin.Client // nil while restarting
	p        *Process
	closed   bool
	failures int // restart attempts in a row without a stable run
}

// start launches and opens a plugin process and supervises it.
func (m *externalMeta) start() error {
	cl, p, err := openPlugin(m.h, m.l.c, m.l.sum, func(ctx context.Context, conn *metaplugin.Conn) (*metaplugin.Client, error) {
		return conn.Open(ctx, m.req)
	})
	if err != nil {
		return err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		cl.Close()
		m.h.release(p)
		return meta.ErrClosed
	}
	m.cl, m.p = cl, p
	m.mu.Unlock()
	if m.h.opts.MaxRestarts > 0 {
		m.h.supervise(p, m.crashed)
	}
	return nil
}

// crashed runs on the crashed process's monitor goroutine: it hands the
// restart to a goroutine of its own.
func (m *externalMeta) crashed(p *Process) {
	m.mu.Lock()
	if m.closed || m.p != p {
		m.mu.Unlock()
		return
	}
	m.cl, m.p = nil, nil
	if time.Since(p.started) >= m.h.opts.RestartStableAfter {
		m.failures = 0
	}
	m.mu.Unlock()
	m.h.mu.Lock()
	if m.h.closed {
		m.h.mu.Unlock()
		return
	}
	m.h.wg.Add(1) // under h.mu, ordered with Close's Wait
	m.h.mu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.h.wg.Done()
		defer m.wg.Done()
		m.restart(p)
	}()
}

// restart starts a new process with backoff, at most MaxRestarts attempts
// in a row; past that, the crash goes to OnCrash.
func (m *externalMeta) restart(dead *Process) {
	h := m.h
	h.release(dead) // the gone process's go-plugin client
	var last error
	for {
		m.mu.Lock()
		m.failures++
		n := m.failures
		m.mu.Unlock()
		if n > h.opts.MaxRestarts {
			h.log.Error("plugin keeps crashing; giving up", "kind", dead.Cand.Kind, "name", dead.Cand.Name, "attempts", n-1)
			if last == nil {
				last = fmt.Errorf("%d restarts in a row did not stay up %s", n-1, h.opts.RestartStableAfter)
			}
			h.giveUp(dead, last)
			return
		}
		wait := min(h.opts.RestartBackoff<<(n-1), 10*time.Second)
		h.log.Warn("restarting plugin", "kind", dead.Cand.Kind, "name", dead.Cand.Name, "attempt", n, "backoff", wait)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-m.stop:
			t.Stop()
			return
		case <-h.done:
			t.Stop()
			return
		}
		if last = m.start(); last == nil {
			h.RestartCounter().WithLabelValues(dead.Cand.Kind, dead.Cand.Name).Inc()
			m.mu.Lock()
			pid := m.p.pid
			m.mu.Unlock()
			h.log.Info("plugin restarted", "kind", dead.Cand.Kind, "name", dead.Cand.Name, "pid", pid, "attempt", n)
			return
		}
		if errors.Is(last, meta.ErrClosed) {
			return
		}
		h.log.Error("restarting plugin failed", "kind", dead.Cand.Kind, "name", dead.Cand.Name, "attempt", n, "error", last)
	}
}

func (m *externalMeta) client() (*metaplugin.Client, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, meta.ErrClosed
	}
	if m.cl == nil {
		return nil, fmt.Errorf("pluginhost: metadata plugin %q is restarting: %w", m.l.c.Name, plugin.ErrPluginShutdown)
	}
	return m.cl, nil
}

func (m *externalMeta) List(ctx context.Context) ([]meta.Entry, error) {
	cl, err := m.client()
	if err != nil {
		return nil, err
	}
	return cl.List(ctx)
}

func (m *externalMeta) Get(ctx context.Context, name string) (meta.Document, error) {
	cl, err := m.client()
	if err != nil {
		return meta.Document{}, err
	}
	return cl.Get(ctx, name)
}

func (m *externalMeta) Put(ctx context.Context, name string, body json.RawMessage) (meta.Document, error) {
	cl, err := m.client()
	if err != nil {
		return meta.Document{}, err
	}
	return cl.Put(ctx, name, body)
}

func (m *externalMeta) Apply(ctx context.Context, docs []meta.Document) error {
	cl, err := m.client()
	if err != nil {
		return err
	}
	return cl.Apply(ctx, docs)
}

// Close stops any restart in progress, closes the store and stops its
// process.
func (m *externalMeta) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return meta.ErrClosed
	}
	m.closed = true
	close(m.stop)
	m.mu.Unlock()
	m.wg.Wait()
	m.mu.Lock()
	cl, p := m.cl, m.p
	m.cl, m.p = nil, nil
	m.mu.Unlock()
	if cl == nil {
		return nil
	}
	err := cl.Close()
	m.h.release(p)
	return err
}
