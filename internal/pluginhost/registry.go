package pluginhost

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/sdk/meta"
	"github.com/replicatorhq/replicator/sdk/plugin"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/transport"
)

// ErrUnknownPlugin means no plugin of the asked kind has the asked name.
var ErrUnknownPlugin = errors.New("pluginhost: unknown plugin")

// StoreOptions are what the host tells a store plugin when it opens one.
type StoreOptions struct {
	// SegmentSize is the size of one commit-log segment file; master and
	// slave must agree on it.
	SegmentSize int64
	// SyncFlush makes Append wait for the bytes to be durable (RocketMQ
	// SYNC_FLUSH); otherwise a background flusher writes them (ASYNC_FLUSH).
	SyncFlush bool
	// MaxMessageSize bounds a message body (RocketMQ maxMessageSize).
	MaxMessageSize int64
	Logger         hclog.Logger          // nil: no logs
	Registerer     prometheus.Registerer // nil: no metrics
}

// TransportOptions are what the host tells a transport plugin.
type TransportOptions struct {
	// Options are transport-specific settings, passed verbatim to an
	// external transport plugin (builtins ignore them).
	Options    map[string]string
	Logger     hclog.Logger
	Registerer prometheus.Registerer
}

// MetadataOptions are what the host tells a metadata plugin when it opens
// one.
type MetadataOptions struct {
	// CreateDefaults creates RocketMQ's default documents that are missing
	// (a master's store; a slave copies its master's).
	CreateDefaults bool
	// MaxDocuments and MaxTotalSize bound the builtin store (0: its
	// defaults); an external plugin applies its own limits.
	MaxDocuments int
	MaxTotalSize int64
	Logger       hclog.Logger          // nil: no logs
	Registerer   prometheus.Registerer // nil: no metrics
}

// MetadataFactory opens the metadata store whose directory is dir (the
// builtin "files" keeps its documents there).
type MetadataFactory func(dir string, opts MetadataOptions) (meta.Store, error)

// StoreFactory opens a store whose root directory is dir (the node's data
// directory, which the store shares with the lock file and the metadata's
// config/ directory; the builtin commitlog uses dir/commitlog and
// dir/commitlog.checkpoint).
type StoreFactory func(dir string, opts StoreOptions) (store.Store, error)

// TransportFactory returns a transport.
type TransportFactory func(opts TransportOptions) (transport.Transport, error)

// Registry maps plugin names to constructors, one namespace per kind. Safe
// for concurrent use.
type Registry struct {
	mu         sync.Mutex
	dir        string
	stores     map[string]StoreFactory
	transports map[string]TransportFactory
	metadata   map[string]MetadataFactory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{stores: map[string]StoreFactory{}, transports: map[string]TransportFactory{}, metadata: map[string]MetadataFactory{}}
}

// SetDir records the plugin directory (--plugins). It must be an existing
// directory; Host.LoadDir loads the plugins found there, which override
// builtins of the same name.
func (r *Registry) SetDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("pluginhost: plugin directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("pluginhost: plugin directory %q is not a directory", dir)
	}
	r.mu.Lock()
	r.dir = dir
	r.mu.Unlock()
	return nil
}

// Dir is the plugin directory, "" when none was set.
func (r *Registry) Dir() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dir
}

// RegisterStore adds (or replaces) the store plugin name.
func (r *Registry) RegisterStore(name string, f StoreFactory) { add(r, r.stores, name, f) }

// RegisterTransport adds (or replaces) the transport plugin name.
func (r *Registry) RegisterTransport(name string, f TransportFactory) { add(r, r.transports, name, f) }

// RegisterMetadata adds (or replaces) the metadata plugin name.
func (r *Registry) RegisterMetadata(name string, f MetadataFactory) { add(r, r.metadata, name, f) }

// Store returns the store plugin name.
func (r *Registry) Store(name string) (StoreFactory, error) {
	return lookup(r, r.stores, plugin.KindStore, name)
}

// Transport returns the transport plugin name.
func (r *Registry) Transport(name string) (TransportFactory, error) {
	return lookup(r, r.transports, plugin.KindTransport, name)
}

// Metadata returns the metadata plugin name.
func (r *Registry) Metadata(name string) (MetadataFactory, error) {
	return lookup(r, r.metadata, plugin.KindMetadata, name)
}

// StoreNames lists the store plugins, sorted.
func (r *Registry) StoreNames() []string { return list(r, r.stores) }

// TransportNames lists the transport plugins, sorted.
func (r *Registry) TransportNames() []string { return list(r, r.transports) }

// MetadataNames lists the metadata plugins, sorted.
func (r *Registry) MetadataNames() []string { return list(r, r.metadata) }

// add, lookup and list are the registry's operations on the namespace of
// one kind (m, one of r's maps, which are never replaced), under r.mu.

func add[F any](r *Registry, m map[string]F, name string, f F) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m[name] = f
}

func lookup[F any](r *Registry, m map[string]F, kind, name string) (F, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := m[name]
	if !ok {
		return f, fmt.Errorf("%w: no %s plugin %q (have %s)", ErrUnknownPlugin, kind, name, names(m))
	}
	return f, nil
}

func list[F any](r *Registry, m map[string]F) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return sortedKeys(m)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func names[V any](m map[string]V) string {
	k := sortedKeys(m)
	if len(k) == 0 {
		return "none"
	}
	return strings.Join(k, ", ")
}
