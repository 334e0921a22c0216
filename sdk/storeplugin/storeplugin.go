package storeplugin

import (
	"context"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/replicatorhq/replicator/sdk/internal/pluginkind"
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

// Plugin is the go-plugin plugin of the store kind (a goplugin.GRPCPlugin
// with the fields Open and Logger). The plugin side sets Open (and Logger,
// handed to Open; nil = no logs); the host side uses it empty and gets a
// *Conn from Dispense.
type Plugin = pluginkind.Plugin[Opener, service]

// service is the store kind's part of Plugin.
type service struct{}

// Register registers the store service.
func (service) Register(s *grpc.Server, open Opener, log hclog.Logger) {
	storev1.RegisterStoreServer(s, newServer(open, log))
}

// Conn returns a *Conn.
func (service) Conn(cc *grpc.ClientConn) any { return &Conn{rpc: storev1.NewStoreClient(cc)} }

// Conn is the host's handle on a store plugin that has not opened its store
// yet. Open it once.
type Conn struct{ rpc storev1.StoreClient }
