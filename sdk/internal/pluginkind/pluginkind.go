// Package pluginkind is the go-plugin glue every plugin kind of the SDK
// shares (sdk/storeplugin, sdk/transportplugin, sdk/metaplugin): the
// goplugin.GRPCPlugin that registers the kind's gRPC service on the plugin
// side and hands the host the kind's connection. A kind adds only its
// Service: which server it registers over its Opener, and which handle the
// host gets.
package pluginkind

import (
	"context"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// Service is a kind's part of the glue, as a type with no state (its zero
// value is used). O is the kind's Opener.
type Service[O any] interface {
	// Register registers the kind's gRPC service on s: the plugin side,
	// serving what open opens, logging to log (nil: no logs).
	Register(s *grpc.Server, open O, log hclog.Logger)
	// Conn is the host's handle on a plugin of the kind, over cc: what
	// Dispense returns.
	Conn(cc *grpc.ClientConn) any
}

// Plugin is the go-plugin plugin of a kind. The plugin side sets Open; the
// host side uses it empty and gets the kind's Conn from Dispense.
type Plugin[O any, S Service[O]] struct {
	goplugin.NetRPCUnsupportedPlugin
	Open   O
	Logger hclog.Logger // handed to Open; nil = no logs
}

var _ goplugin.GRPCPlugin = (*Plugin[any, Service[any]])(nil)

// GRPCServer registers the kind's service.
func (p *Plugin[O, S]) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	var svc S
	svc.Register(s, p.Open, p.Logger)
	return nil
}

// GRPCClient returns the kind's Conn.
func (p *Plugin[O, S]) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	var svc S
	return svc.Conn(cc), nil
}
