package storeplugin

import (
	"context"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/replicatorhq/replicator/sdk/plugin"
	"github.com/replicatorhq/replicator/sdk/proto/storev1"
	"github.com/replicatorhq/replicator/sdk/store"
)

// OpenRequest is what the host asks a store plugin to open: the daemon's
// store configuration. Plain Go, so fields can be added without breaking
// plugins.
type OpenRequest struct {
	Dir         string            // the store's directory
	SegmentSize int64             // bytes per segment file; 0 = the store's default
	Options     map[string]string // store-specific settings, passed through verbatim
	Logger      hclog.Logger      // the plugin's logger (relayed to the host); never nil
}

// Opener opens the plugin's store. Serve calls it once, when the host sends
// Open.
type Opener func(ctx context.Context, req OpenRequest) (store.Store, error)

// SegmentFiles is an optional capability of a served Store: it names the
// file that holds the segment starting at base, so the host can map it
// read-only and read the log without a round trip, and (unless the store
// also implements NoHostWrites) write a slave's replicated bytes into it
// itself. Return ok=false for a segment not on disk.
//
// A store that implements it promises the RocketMQ MappedFile model:
//   - the file of the segment at base holds the log's raw bytes: byte
//     base+k of the log at file offset k, no file header, no compression,
//     no per-block checksums or padding;
//   - segments are SegmentSize long and one starts at LastSegmentStart;
//   - bytes below the max offset never change until a Truncate;
//   - a file is only ever removed (unlinked) whole, never shrunk, replaced
//     or renamed while it is part of the log.
//
// And, for the host's in-place writes, unless it implements NoHostWrites
// (the replica write path: AppendAt on a slave; and a master's Append,
// which the host encodes itself as a RocketMQ v1 record at the max offset
// with the next queue offset the store reported for its queue, then hands
// to AppendAt the same way):
//   - AppendAt(offset, data) writes data at file offset offset-base
//     (pwrite or a shared mapping), never at the file's end (no O_APPEND,
//     no Seek to the end): the host has already written the same bytes
//     there, so the write is an identical overwrite;
//   - bytes beyond the max offset may appear in the file before AppendAt
//     adopts them (and stay there if the plugin dies first): the store
//     must not treat bytes past its max offset as part of the log until it
//     adopts them, and its recovery must verify records (as a commit log
//     does) rather than trust the file size;
//   - AppendAt keeps the queue offsets of the records it adopts: an Append
//     after it continues each (topic, queue) where those records left it
//     (storetest's ReplicaQueueOffsets case; a promoted slave needs it too);
//   - the host writes only inside a segment the store has created and
//     never across its end (a record goes there only with room left for an
//     end-of-file filler); the first bytes of a new segment, and every
//     Append the host cannot encode (first of its queue, too large, invalid,
//     sync_flush=true), still go to the store.
//
// Run sdk/storetest through storetest.PluginFactory: with a store that
// implements SegmentFiles it exercises the mapped reads and the in-place
// writes, including a restart.
type SegmentFiles interface {
	SegmentFile(base int64) (path string, ok bool)
}

// NoHostWrites is an optional marker of a store that implements
// SegmentFiles for reads but whose files the host must not write: its
// AppendAt gets the bytes on the append stream (one round trip per slave
// batch) and writes them its own way.
type NoHostWrites interface {
	NoHostWrites()
}

// Flusher is an optional capability of a served Store: Flush makes every
// written byte durable. The host's Client.Flush calls it.
type Flusher interface {
	Flush() error
}

// Serve serves the store that open opens as the store plugin name (version
// is free form) and never returns. It is the whole main of a store plugin:
//
//	func main() { storeplugin.Serve("mystore", "1.0.0", open) }
func Serve(name, version string, open Opener) {
	plugin.Serve(plugin.Info{Kind: plugin.KindStore, Name: name, Version: version},
		&Plugin{Open: open, Logger: plugin.Logger(name)})
}

// Plugin is the go-plugin plugin of the store kind. The plugin side sets
// Open; the host side uses it empty and gets a *Conn from Dispense.
type Plugin struct {
	goplugin.NetRPCUnsupportedPlugin
	Open   Opener
	Logger hclog.Logger // handed to Open; nil = no logs
}

var _ goplugin.GRPCPlugin = (*Plugin)(nil)

// GRPCServer registers the store service.
func (p *Plugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	storev1.RegisterStoreServer(s, newServer(p.Open, p.Logger))
	return nil
}

// GRPCClient returns a *Conn.
func (p *Plugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return &Conn{rpc: storev1.NewStoreClient(cc)}, nil
}

// Conn is the host's handle on a store plugin that has not opened its store
// yet. Open it once.
type Conn struct{ rpc storev1.StoreClient }
