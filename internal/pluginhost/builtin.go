package pluginhost

import (
	"github.com/replicatorhq/replicator/plugins/commitlog"
	"github.com/replicatorhq/replicator/plugins/metadata"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/meta"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/transport"
)

// Builtin returns a registry of the plugins linked into the binary: the
// store "commitlog" (plugins/commitlog), the transport "tcp"
// (plugins/transport-tcp) and the metadata store "files"
// (plugins/metadata).
func Builtin() *Registry {
	r := NewRegistry()
	r.RegisterStore("commitlog", func(dir string, opts StoreOptions) (store.Store, error) {
		o := commitlog.DefaultOptions()
		if opts.SegmentSize > 0 {
			o.SegmentSize = opts.SegmentSize
		}
		if opts.MaxMessageSize > 0 {
			o.MaxMessageSize = int(RecordLimit(opts.MaxMessageSize))
		}
		if opts.SyncFlush {
			o.FlushMode = commitlog.FlushSync
		}
		o.Logger, o.Registerer = opts.Logger, opts.Registerer
		l, err := commitlog.Open(dir, o)
		if err != nil {
			return nil, err // not a typed nil *Log in the interface
		}
		return l, nil
	})
	r.RegisterTransport("tcp", func(opts TransportOptions) (transport.Transport, error) {
		o := tcptransport.DefaultOptions()
		o.Logger, o.Registerer = opts.Logger, opts.Registerer
		return tcptransport.New(o), nil
	})
	r.RegisterMetadata("files", func(dir string, opts MetadataOptions) (meta.Store, error) {
		st, err := metadata.Open(dir, metadata.Options{
			CreateDefaults: opts.CreateDefaults,
			MaxDocuments:   opts.MaxDocuments,
			MaxTotalSize:   opts.MaxTotalSize,
			Logger:         opts.Logger,
			Registerer:     opts.Registerer,
		})
		if err != nil {
			return nil, err // not a typed nil *Store in the interface
		}
		return st, nil
	})
	return r
}
