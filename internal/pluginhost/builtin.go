package pluginhost

import (
	"github.com/replicatorhq/replicator/plugins/commitlog"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/transport"
)

// Builtin returns a registry of the plugins linked into the binary: the
// store "commitlog" (plugins/commitlog) and the transport "tcp"
// (plugins/transport-tcp).
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
	return r
}
