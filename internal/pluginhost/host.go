package pluginhost

import (
	"context"
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

	"github.com/replicatorhq/replicator/sdk/metaplugin"
	"github.com/replicatorhq/replicator/sdk/plugin"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/sdk/storeplugin"
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
	// BuiltinMetadata names the builtin metadata plugins, for Entries (the
	// daemon links "files", plugins/metadata).
	BuiltinMetadata []string
	// Store tunes the host side of external stores.
	Store storeplugin.ClientConfig
	// OnCrash is called once per plugin process that exits on its own (after
	// the crash is logged and counted). The daemon shuts down cleanly.
	OnCrash func(Entry, error)
	// LaunchOptions.StartTimeout, for tests; 0 = 10s.
	StartTimeout time.Duration
	Logger       hclog.Logger          // nil: no logs
	Registerer   prometheus.Registerer // nil: no metrics
}

// Host loads external plugins from a directory into a Registry, where they
// override builtins of the same name, and owns their processes.
type Host struct {
	reg     *Registry
	opts    HostOptions
	log     hclog.Logger
	crashes *prometheus.CounterVec

	mu       sync.Mutex
	external map[string]Entry  // kind/name -> entry
	metas    map[string]loaded // name -> external metadata plugin
	failed   []error
	procs    map[*Process]struct{}
	closed   bool
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
		metas:    map[string]loaded{},
		procs:    map[*Process]struct{}{},
		crashes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "replicator_plugin_crashes_total",
			Help: "External plugin processes that exited without being asked to.",
		}, []string{"kind", "name"}),
	}
	if err := h.register(opts.Registerer); err != nil {
		return nil, err
	}
	return h, nil
}

// register adds the host's metrics to r (nil: none); registering twice on
// the same registry is fine.
func (h *Host) register(r prometheus.Registerer) error {
	if r == nil {
		return nil
	}
	if err := r.Register(h.crashes); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return fmt.Errorf("pluginhost: metrics: %w", err)
		}
	}
	return nil
}

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
		if c.Kind == plugin.KindTransport {
			err := fmt.Errorf("%w: %s: external transport plugins are not supported (the TCP transport stays in process)", ErrIncompatible, c.Path)
			h.log.Error("plugin refused", "path", c.Path, "error", err)
			errs = append(errs, err)
			continue
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
		if c.Kind == plugin.KindMetadata {
			h.metas[c.Name] = loaded{c, sum}
		}
		h.mu.Unlock()
		if c.Kind == plugin.KindStore {
			h.reg.RegisterStore(c.Name, h.storeFactory(c, sum))
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

// crashed handles a plugin process that exited on its own.
func (h *Host) crashed(p *Process) {
	h.crashes.WithLabelValues(p.Cand.Kind, p.Cand.Name).Inc()
	err := fmt.Errorf("pluginhost: %s plugin %q (%s, pid %d) exited unexpectedly: %w", p.Cand.Kind, p.Cand.Name, p.Cand.Path, p.pid, plugin.ErrPluginShutdown)
	h.log.Error("plugin crashed", "kind", p.Cand.Kind, "name", p.Cand.Name, "path", p.Cand.Path, "pid", p.pid)
	h.mu.Lock()
	delete(h.procs, p)
	h.mu.Unlock()
	if h.opts.OnCrash != nil {
		h.opts.OnCrash(Entry{Kind: p.Cand.Kind, Name: p.Cand.Name, Version: p.Info.Version, Path: p.Cand.Path}, err)
	}
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
	h.mu.Unlock()
	p.Kill()
}

// storeFactory opens an external store: one plugin process per store.
func (h *Host) storeFactory(c Candidate, sum []byte) StoreFactory {
	return func(dir string, opts StoreOptions) (store.Store, error) {
		if err := h.register(opts.Registerer); err != nil {
			return nil, err
		}
		p, err := h.Start(c, sum)
		if err != nil {
			return nil, err
		}
		raw, err := p.Dispense()
		if err != nil {
			h.release(p)
			return nil, err
		}
		cfg := h.opts.Store
		if opts.Logger != nil {
			cfg.Logger = opts.Logger
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl, err := raw.(*storeplugin.Conn).Open(ctx, storeplugin.OpenRequest{
			Dir:         dir,
			SegmentSize: opts.SegmentSize,
			Options: map[string]string{
				"sync_flush":       strconv.FormatBool(opts.SyncFlush),
				"max_message_size": strconv.FormatInt(opts.MaxMessageSize, 10),
			},
		}, cfg)
		if err != nil {
			h.release(p)
			return nil, err
		}
		return &externalStore{Client: cl, h: h, p: p}, nil
	}
}

// externalStore is an external store whose Close also stops its process.
type externalStore struct {
	*storeplugin.Client
	h *Host
	p *Process
}

func (s *externalStore) Close() error {
	err := s.Client.Close()
	s.h.release(s.p)
	return err
}

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
	for _, n := range h.opts.BuiltinMetadata {
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

// Close kills every plugin process the host started. Idempotent.
func (h *Host) Close() {
	h.mu.Lock()
	h.closed = true
	procs := h.procs
	h.procs = map[*Process]struct{}{}
	h.mu.Unlock()
	for p := range procs {
		p.Kill()
	}
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
func (h *Host) CrashCounter() *prometheus.CounterVec { return h.crashes }

// loaded is a plugin binary that passed LoadDir's checks.
type loaded struct {
	c   Candidate
	sum []byte
}

// OpenMetadata opens the external metadata plugin name, if LoadDir loaded
// one (ok=false otherwise: use the builtin). The store's Close stops the
// plugin process.
func (h *Host) OpenMetadata(name string, req metaplugin.OpenRequest) (st metaplugin.Store, ok bool, err error) {
	h.mu.Lock()
	l, ok := h.metas[name]
	h.mu.Unlock()
	if !ok {
		return nil, false, nil
	}
	p, err := h.Start(l.c, l.sum)
	if err != nil {
		return nil, true, err
	}
	raw, err := p.Dispense()
	if err != nil {
		h.release(p)
		return nil, true, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := raw.(*metaplugin.Conn).Open(ctx, req)
	if err != nil {
		h.release(p)
		return nil, true, err
	}
	return &externalMeta{Client: cl, h: h, p: p}, true, nil
}

// externalMeta is an external metadata store whose Close stops its process.
type externalMeta struct {
	*metaplugin.Client
	h *Host
	p *Process
}

func (m *externalMeta) Close() error {
	err := m.Client.Close()
	m.h.release(m.p)
	return err
}
