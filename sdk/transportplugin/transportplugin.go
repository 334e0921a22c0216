package transportplugin

import (
	"context"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/replicatorhq/replicator/sdk/internal/pluginkind"
	"github.com/replicatorhq/replicator/sdk/plugin"
	"github.com/replicatorhq/replicator/sdk/proto/transportv1"
	"github.com/replicatorhq/replicator/transport"
)

// OpenRequest is what the host asks a transport plugin to open. Plain Go,
// so fields can be added without breaking plugins.
type OpenRequest struct {
	Options map[string]string // transport-specific settings, passed through verbatim
	Logger  hclog.Logger      // the plugin's logger (relayed to the host); never nil
}

// Opener returns the plugin's transport. Serve calls it once, when the host
// sends Open. The transport is the same interface a builtin transport
// implements (transport.Transport); the connections its listeners accept and
// its Dial returns must be kernel sockets (their net.Conn implements
// syscall.Conn, as *net.TCPConn and *net.UnixConn do), with nothing of the
// byte stream read or buffered in the plugin: the SDK hands each socket to
// the host and closes the plugin's descriptor. If the transport also
// implements io.Closer, Close is called when the host closes it.
type Opener func(ctx context.Context, req OpenRequest) (transport.Transport, error)

// Serve serves the transport that open returns as the transport plugin
// name (version is free form) and never returns. It is the whole main of a
// transport plugin:
//
//	func main() { transportplugin.Serve("mytransport", "1.0.0", open) }
func Serve(name, version string, open Opener) {
	plugin.Serve(plugin.Info{Kind: plugin.KindTransport, Name: name, Version: version},
		&Plugin{Open: open, Logger: plugin.Logger(name)})
}

// Plugin is the go-plugin plugin of the transport kind (a
// goplugin.GRPCPlugin with the fields Open and Logger). The plugin side sets
// Open (and Logger, handed to Open; nil = no logs); the host side uses it
// empty and gets a *Conn from Dispense.
type Plugin = pluginkind.Plugin[Opener, service]

// service is the transport kind's part of Plugin.
type service struct{}

// Register registers the transport service.
func (service) Register(s *grpc.Server, open Opener, log hclog.Logger) {
	transportv1.RegisterTransportServer(s, newServer(open, log))
}

// Conn returns a *Conn.
func (service) Conn(cc *grpc.ClientConn) any { return &Conn{rpc: transportv1.NewTransportClient(cc)} }

// Conn is the host's handle on a transport plugin that has not opened its
// transport yet. Open it once.
type Conn struct{ rpc transportv1.TransportClient }
