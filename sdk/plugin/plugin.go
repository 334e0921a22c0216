package plugin

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/replicatorhq/replicator/sdk/internal/grpcopt"
	"github.com/replicatorhq/replicator/sdk/internal/rpcerr"
	"github.com/replicatorhq/replicator/sdk/proto/pluginv1"
)

// ProtocolVersion is the plugin protocol this SDK speaks. The host lists the
// versions it supports (go-plugin VersionedPlugins) and the plugin picks the
// highest both know.
const ProtocolVersion = 1

// Plugin kinds: the <kind> part of a binary's name and of Info.Kind.
const (
	KindStore     = "store"
	KindMetadata  = "metadata"
	KindTransport = "transport"
)

// InfoPluginName is the go-plugin plugin-set key of the Info service.
const InfoPluginName = "info"

// Handshake is the go-plugin handshake shared by the host and every plugin.
// The cookie only keeps a user from running a plugin binary by hand; it is
// not a security feature (use checksum pinning for that).
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "REPLICATOR_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "3f1d6c0a-rocketmq-ha-replicator",
}

// ErrPluginShutdown is returned by every external-plugin call once the plugin
// process is gone (crashed, killed or closed underneath the host).
var ErrPluginShutdown = rpcerr.ErrPluginShutdown

// Info describes a plugin binary.
type Info struct {
	Kind     string // KindStore, KindMetadata or KindTransport
	Name     string // the name the configuration selects, e.g. "commitlog"
	Version  string // the plugin's own version, free form
	Protocol int    // the protocol version it serves (filled in by Serve)
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// Validate checks the kind and the name.
func (i Info) Validate() error {
	switch i.Kind {
	case KindStore, KindMetadata, KindTransport:
	default:
		return fmt.Errorf("plugin: unknown kind %q", i.Kind)
	}
	if !nameRE.MatchString(i.Name) {
		return fmt.Errorf("plugin: invalid name %q (want [a-z0-9][a-z0-9_-]*)", i.Name)
	}
	return nil
}

// BinaryName is the file name a plugin of this kind and name must have.
func BinaryName(kind, name string) string { return "replicator-" + kind + "-" + name }

// PluginSet is the go-plugin plugin set of one protocol version: the Info
// service plus the kind's own plugin under the kind's name.
func PluginSet(info Info, kindPlugin goplugin.Plugin) goplugin.PluginSet {
	return goplugin.PluginSet{
		InfoPluginName: &InfoPlugin{Info: info},
		info.Kind:      kindPlugin,
	}
}

// Serve serves kindPlugin as the plugin described by info and does not
// return. It is what the kind packages' Serve one-liners call. A binary
// started by hand (without the handshake cookie) prints a notice and exits 1.
func Serve(info Info, kindPlugin goplugin.Plugin) {
	info.Protocol = ProtocolVersion
	if err := info.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	logger := Logger(info.Name)
	if os.Getenv(Handshake.MagicCookieKey) == Handshake.MagicCookieValue {
		go watchParent(logger, os.Getppid(), time.Second)
	}
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: map[int]goplugin.PluginSet{ProtocolVersion: PluginSet(info, kindPlugin)},
		GRPCServer:       NewGRPCServer,
		Logger:           logger,
	})
}

// Logger is the logger a plugin should use: JSON lines on stderr, which the
// host parses and relays under the plugin's name with their levels.
func Logger(name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      hclog.Debug,
		Output:     os.Stderr,
		JSONFormat: true,
	})
}

// watchParent exits the plugin when its parent process changes (the host
// died): the portable twin of Linux's parent-death signal.
func watchParent(logger hclog.Logger, ppid int, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for range t.C {
		if os.Getppid() != ppid {
			logger.Error("host process is gone; exiting", "parent", ppid)
			os.Exit(2)
		}
	}
}

// NewGRPCServer is the go-plugin ServeConfig.GRPCServer factory: go-plugin's
// options (TLS when AutoMTLS is on) plus the SDK's own (message bounds,
// windows, the codec; sdk/internal/grpcopt).
func NewGRPCServer(opts []grpc.ServerOption) *grpc.Server {
	return grpc.NewServer(append(opts, grpcopt.ServerOptions()...)...)
}

// DialOptions are the gRPC dial options the host passes to go-plugin
// (ClientConfig.GRPCDialOptions) to match NewGRPCServer's.
func DialOptions() []grpc.DialOption { return grpcopt.DialOptions() }

// InfoPlugin is the go-plugin plugin of the Info service.
type InfoPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	Info Info // served by the plugin side; unused on the host side
}

var _ goplugin.GRPCPlugin = (*InfoPlugin)(nil)

// GRPCServer registers the Info service.
func (p *InfoPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	pluginv1.RegisterInfoServer(s, &infoServer{info: p.Info})
	return nil
}

// GRPCClient returns an *InfoClient.
func (p *InfoPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return &InfoClient{rpc: pluginv1.NewInfoClient(cc)}, nil
}

type infoServer struct {
	pluginv1.UnimplementedInfoServer
	info Info
}

func (s *infoServer) Describe(context.Context, *pluginv1.DescribeRequest) (*pluginv1.DescribeResponse, error) {
	return &pluginv1.DescribeResponse{
		Kind:     s.info.Kind,
		Name:     s.info.Name,
		Version:  s.info.Version,
		Protocol: int32(s.info.Protocol),
	}, nil
}

// InfoClient is the host side of the Info service.
type InfoClient struct{ rpc pluginv1.InfoClient }

// Describe asks the plugin what it is.
func (c *InfoClient) Describe(ctx context.Context) (Info, error) {
	r, err := c.rpc.Describe(ctx, &pluginv1.DescribeRequest{})
	if err != nil {
		return Info{}, rpcerr.FromStatus(nil, err)
	}
	return Info{Kind: r.Kind, Name: r.Name, Version: r.Version, Protocol: int(r.Protocol)}, nil
}
