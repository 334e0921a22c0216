package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Defaults of Config.
const (
	DefaultName         = "default"
	DefaultClientAddr   = "127.0.0.1:2379"
	DefaultTickMs       = 100
	DefaultElectionMs   = 1000
	DefaultStartTimeout = time.Minute
)

// ErrConfig is a Config that cannot describe a cluster; check with
// errors.Is.
var ErrConfig = errors.New("embedetcd: invalid configuration")

// Config describes one embedded etcd member.
type Config struct {
	// Dir is the member's data directory (created when missing).
	Dir string
	// Name is the member's name, unique in its cluster (DefaultName).
	Name string
	// ClientAddr is host:port of the client listener (DefaultClientAddr);
	// port 0 picks a free port (see Server.ClientURL).
	ClientAddr string
	// PeerAddr is host:port of the peer listener. Empty: the address of
	// Name in InitialCluster, or, for a single member, 127.0.0.1 with a
	// free port.
	PeerAddr string
	// InitialCluster lists the members as etcd's --initial-cluster does:
	// "a=http://127.0.0.1:2380,b=http://127.0.0.1:2381". Empty: this
	// member alone.
	InitialCluster string
	// Existing joins an existing cluster (etcd's
	// --initial-cluster-state existing) instead of forming a new one.
	Existing bool
	// TickMs and ElectionMs are etcd's heartbeat interval and election
	// timeout (DefaultTickMs, DefaultElectionMs). The shortest lease
	// TTL etcd grants is 1.5 x ElectionMs, rounded up to a second.
	TickMs, ElectionMs uint
	// StartTimeout bounds the wait for the member to serve
	// (DefaultStartTimeout): a multi-member cluster serves once a quorum
	// of members runs.
	StartTimeout time.Duration
	// Logger receives etcd's logs (hclog.NewNullLogger() when nil).
	Logger hclog.Logger
	// TLSCert and TLSKey (PEM files), when set, serve clients over TLS
	// (https:// URLs); TLSClientCA then requires client certificates
	// signed by a CA in that file. Peer traffic is not encrypted: keep
	// members on a trusted network.
	TLSCert, TLSKey, TLSClientCA string
	// NoFsync skips etcd's fsyncs (its WAL and its database): a crash of
	// the machine can lose writes etcd acknowledged. For tests and
	// throwaway clusters only, where a shared, busy disk would otherwise
	// stall lease renewals for hundreds of milliseconds.
	NoFsync bool
}

// Server is a running embedded etcd member.
type Server struct {
	e         *embed.Etcd
	clientURL string
	quiet     *atomic.Bool
}

func httpURL(addr string) (url.URL, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return url.URL{}, fmt.Errorf("%w: address %q: want host:port", ErrConfig, addr)
	}
	return url.URL{Scheme: "http", Host: net.JoinHostPort(host, port)}, nil
}

// peerOf returns the URL of name in an --initial-cluster list.
func peerOf(cluster, name string) (string, error) {
	for _, m := range strings.Split(cluster, ",") {
		n, u, ok := strings.Cut(strings.TrimSpace(m), "=")
		if !ok || n == "" || u == "" {
			return "", fmt.Errorf("%w: initial cluster entry %q: want name=URL", ErrConfig, m)
		}
		if n == name {
			pu, err := url.Parse(u)
			if err != nil || pu.Host == "" {
				return "", fmt.Errorf("%w: peer URL %q of %s", ErrConfig, u, name)
			}
			return pu.Host, nil
		}
	}
	return "", fmt.Errorf("%w: member %q is not in the initial cluster %q", ErrConfig, name, cluster)
}

// Start runs the member and waits until it serves clients, ctx ends, or
// StartTimeout passes.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("%w: no data directory", ErrConfig)
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.ClientAddr == "" {
		cfg.ClientAddr = DefaultClientAddr
	}
	if cfg.TickMs == 0 {
		cfg.TickMs = DefaultTickMs
	}
	if cfg.ElectionMs == 0 {
		cfg.ElectionMs = DefaultElectionMs
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.PeerAddr == "" {
		if cfg.InitialCluster == "" {
			cfg.PeerAddr = "127.0.0.1:0"
		} else {
			addr, err := peerOf(cfg.InitialCluster, cfg.Name)
			if err != nil {
				return nil, err
			}
			cfg.PeerAddr = addr
		}
	}
	cu, err := httpURL(cfg.ClientAddr)
	if err != nil {
		return nil, err
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") || (cfg.TLSClientCA != "" && cfg.TLSCert == "") {
		return nil, fmt.Errorf("%w: TLS needs a certificate and its key (and a client CA only with them)", ErrConfig)
	}
	if cfg.TLSCert != "" {
		cu.Scheme = "https"
	}
	pu, err := httpURL(cfg.PeerAddr)
	if err != nil {
		return nil, err
	}
	if cfg.InitialCluster != "" {
		if _, err := peerOf(cfg.InitialCluster, cfg.Name); err != nil {
			return nil, err
		}
	}

	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.Dir
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	ec.InitialCluster = cfg.InitialCluster
	if ec.InitialCluster == "" {
		ec.InitialCluster = cfg.Name + "=" + pu.String()
	}
	ec.ClusterState = embed.ClusterStateFlagNew
	if cfg.Existing {
		ec.ClusterState = embed.ClusterStateFlagExisting
	}
	ec.InitialClusterToken = "replicator-controller"
	ec.TickMs, ec.ElectionMs = cfg.TickMs, cfg.ElectionMs
	ec.UnsafeNoFsync = cfg.NoFsync
	ec.ListenMetricsUrls = nil
	if cfg.TLSCert != "" {
		ec.ClientTLSInfo = transport.TLSInfo{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey,
			TrustedCAFile: cfg.TLSClientCA, ClientCertAuth: cfg.TLSClientCA != ""}
	}
	ec.Logger = "zap"
	core := &hclogCore{log: cfg.Logger, quiet: new(atomic.Bool)}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(core))
	// Keep the history short: the controller's keys are few and small.
	ec.AutoCompactionMode = embed.CompactorModeRevision
	ec.AutoCompactionRetention = "1000"

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("embedetcd: start member %s in %s: %w", cfg.Name, cfg.Dir, err)
	}
	timer := time.NewTimer(cfg.StartTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedetcd: member %s: %w", cfg.Name, err)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("embedetcd: member %s: %w", cfg.Name, ctx.Err())
	case <-timer.C:
		e.Close()
		return nil, fmt.Errorf("embedetcd: member %s not serving after %v (is a quorum of %q running?)", cfg.Name, cfg.StartTimeout, ec.InitialCluster)
	}
	s := &Server{e: e, clientURL: cu.Scheme + "://" + e.Clients[0].Addr().String(), quiet: core.quiet}
	return s, nil
}

// ClientURL is the URL clients connect to (with the port the listener
// got, when ClientAddr had port 0).
func (s *Server) ClientURL() string { return s.clientURL }

// Err delivers a fatal error of the member (a listener that failed).
func (s *Server) Err() <-chan error { return s.e.Err() }

// Close stops the member gracefully: pending requests finish, the data
// directory is left consistent.
func (s *Server) Close() {
	s.quiet.Store(true)
	s.e.Close()
}
