package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/replicatorhq/replicator/controller"
	"github.com/replicatorhq/replicator/controller/embedetcd"
	"github.com/replicatorhq/replicator/controller/etcdstore"
	"github.com/replicatorhq/replicator/internal/config"
)

// controllerOpts are the options of the controller command and its
// delete-group and show-group actions.
type controllerOpts struct {
	Data       string
	Listen     string
	PeerListen string
	Peers      string
	Name       string
	Join       bool
	Supervise  bool
	Unclean    bool
	Delay      time.Duration
	TLSCert    string
	TLSKey     string
	TLSCA      string
	Group      string // delete-group, show-group
	Prefix     string
	Client     controllerClient // delete-group, show-group, and the supervisor
}

// controllerClient are the options of an etcd client of the controller,
// named as etcd's own clients name them with a controller- prefix.
type controllerClient struct {
	Endpoints    []string
	CACert       string
	Cert, Key    string
	User         string // USER or USER:PASSWORD
	PasswordFile string
	Timeout      time.Duration
}

// controllerClientOptions are the options of c.
func controllerClientOptions(c *controllerClient) []*config.Option {
	return []*config.Option{
		{Name: "controller", Meta: "URL[,URL...]", Help: "the controller's etcd endpoints (https:// for TLS)", Default: "http://" + defaultControllerListen, Value: config.CSV(&c.Endpoints, checkEndpoint)},
		{Name: "controller-cacert", Meta: "FILE", Help: "verify the controller's TLS certificate against the CAs in this PEM file (default: system roots)", Value: config.File(&c.CACert, true)},
		{Name: "controller-cert", Meta: "FILE", Help: "client certificate (PEM) for a controller that requires one (needs --controller-key)", Value: config.File(&c.Cert, true)},
		{Name: "controller-key", Meta: "FILE", Help: "PEM private key of --controller-cert", Value: config.File(&c.Key, true)},
		{Name: "controller-user", Meta: "USER[:PASSWORD]", Help: "etcd user for a controller with authentication on (password here or in --controller-password-file)", Value: config.String(&c.User, false)},
		{Name: "controller-password-file", Meta: "FILE", Help: "file holding the password of --controller-user", Value: config.File(&c.PasswordFile, true)},
		{Name: "controller-timeout", Meta: "DURATION", Help: "how long to wait for the controller (dial and each request)", Default: "10s", Value: config.Duration(&c.Timeout, time.Millisecond, time.Hour)},
	}
}

// config builds the etcd client configuration of c.
func (c *controllerClient) config(endpoints []string, log hclog.Logger) (clientv3.Config, error) {
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: c.Timeout, Logger: embedetcd.ZapLogger(log)}
	if (c.Cert == "") != (c.Key == "") {
		return cfg, usage(errors.New("--controller-cert and --controller-key go together"))
	}
	if c.CACert != "" || c.Cert != "" || slices.ContainsFunc(endpoints, func(u string) bool { return strings.HasPrefix(u, "https://") }) {
		info := transport.TLSInfo{CertFile: c.Cert, KeyFile: c.Key, TrustedCAFile: c.CACert}
		tc, err := info.ClientConfig()
		if err != nil {
			return cfg, usage(fmt.Errorf("controller TLS: %w", err))
		}
		cfg.TLS = tc
	}
	if c.User != "" {
		user, pw, hasPW := strings.Cut(c.User, ":")
		if c.PasswordFile != "" {
			if hasPW {
				return cfg, usage(errors.New("--controller-user has a password and --controller-password-file is set"))
			}
			b, err := os.ReadFile(c.PasswordFile)
			if err != nil {
				return cfg, usage(fmt.Errorf("--controller-password-file: %w", err))
			}
			pw = strings.TrimRight(string(b), "\r\n")
		}
		cfg.Username, cfg.Password = user, pw
	} else if c.PasswordFile != "" {
		return cfg, usage(errors.New("--controller-password-file needs --controller-user"))
	}
	return cfg, nil
}

// dial connects to the controller at endpoints (default: c.Endpoints).
func (c *controllerClient) dial(ctx context.Context, log hclog.Logger, endpoints ...string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		endpoints = c.Endpoints
	}
	cfg, err := c.config(endpoints, log)
	if err != nil {
		return nil, err
	}
	cfg.Context = ctx
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the controller %v: %w", endpoints, err)
	}
	return cli, nil
}

const defaultControllerListen = "127.0.0.1:2379"

func checkEndpoint(s string) error {
	_, err := config.NormalizeURL(s)
	return err
}

func controllerCommand(c *controllerOpts) *config.Command {
	return &config.Command{
		Name:     "controller",
		Synopsis: "run the controller store (embedded etcd), or delete or show a group's controller state",
		Args:     "[delete-group|show-group]",
		MaxArgs:  1,
		Help: `Without an argument, run an embedded etcd member as the controller store of
replica groups in controller mode: a single member on --listen by default;
--peers (etcd's --initial-cluster syntax, name=URL,...) and --name form a
multi-member cluster, one process per member, each listening for peers on
its own URL in --peers. Any node can use an existing etcd cluster instead.
Each member also supervises the groups (--supervise): when a master's
registration lease ends, it steps the election (only alive members of the
in-sync set are eligible, unless --unclean-election). SIGINT or SIGTERM
stops the member gracefully and exits 0; a restart on the same --data
resumes it.

delete-group removes every key of --group (its state and registrations)
from the controller at --controller; show-group prints them as JSON. The
--controller-* options configure these clients and the supervisor's
client of its own member (TLS, client certificate, etcd user).`,
		Options: append([]*config.Option{
			{Name: "data", Meta: "DIR", Help: "etcd data directory of this member", Default: "./data/controller", Value: config.String(&c.Data, true)},
			{Name: "listen", Meta: "ADDR", Help: "client address (nodes and tools connect here)", Default: defaultControllerListen, Value: config.Addr(&c.Listen, true)},
			{Name: "peers", Meta: "LIST", Help: "members of a multi-member cluster: name=http://host:port,... (default: this member alone)", Value: config.String(&c.Peers, false)},
			{Name: "name", Meta: "NAME", Help: "this member's name (in --peers)", Default: embedetcd.DefaultName, Value: config.String(&c.Name, true)},
			{Name: "peer-listen", Meta: "ADDR", Help: "peer address (default: this member's URL in --peers; alone: a free loopback port)", Value: config.String(&c.PeerListen, false)},
			{Name: "join", Help: "join an existing cluster (etcd's --initial-cluster-state existing) instead of forming one", Value: config.Bool(&c.Join)},
			{Name: "supervise", Help: "elect a new master for any group whose master's registration ends (every member may; repeats are harmless)", Default: "true", Value: config.Bool(&c.Supervise)},
			{Name: "election-delay", Meta: "DURATION", Help: "supervised elections wait this long after a master's lease expired (a margin over the nodes' lease TTL for a master that lags; 0: at once)", Default: defaultElectionDelay, Value: config.Duration(&c.Delay, 0, 10*time.Minute)},
			{Name: "unclean-election", Help: "supervised elections may pick a node outside the in-sync set when no member is alive (logged as data loss)", Value: config.Bool(&c.Unclean)},
			{Name: "tls-cert", Meta: "FILE", Help: "serve clients over TLS with this PEM certificate (needs --tls-key)", Value: config.File(&c.TLSCert, true)},
			{Name: "tls-key", Meta: "FILE", Help: "PEM private key of --tls-cert", Value: config.File(&c.TLSKey, true)},
			{Name: "tls-client-ca", Meta: "FILE", Help: "require client certificates signed by a CA in this PEM file (the supervisor then needs --controller-cert)", Value: config.File(&c.TLSCA, true)},
			{Name: "group", Meta: "NAME", Help: "delete-group, show-group: the group", Value: config.String(&c.Group, false)},
			{Name: "prefix", Meta: "PREFIX", Help: "root of the controller's key space", Default: etcdstore.DefaultPrefix, Value: config.String(&c.Prefix, true)},
		}, controllerClientOptions(&c.Client)...),
	}
}

func runController(ctx context.Context, e *env) int {
	c := &e.opts.ctl
	if len(e.args) == 0 {
		return serveController(ctx, e, c)
	}
	switch e.args[0] {
	case "delete-group", "show-group":
	default:
		return e.failErr("controller", usage(fmt.Errorf("unknown action %q (want delete-group or show-group)", e.args[0])))
	}
	if err := etcdstore.ValidGroup(c.Group); err != nil {
		return e.failErr("controller "+e.args[0], usage(fmt.Errorf("--group: %w", err)))
	}
	ctx, cancel := context.WithTimeout(ctx, c.Client.Timeout)
	defer cancel()
	cli, err := c.Client.dial(ctx, e.log.Named("etcd-client"))
	if err != nil {
		return e.failErr("controller "+e.args[0], err)
	}
	defer cli.Close()
	store, err := etcdstore.New(etcdstore.Config{Client: cli, Prefix: c.Prefix, Logger: e.log.Named("controller")})
	if err != nil {
		return e.failErr("controller "+e.args[0], err)
	}
	if e.args[0] == "delete-group" {
		n, err := store.DeleteGroup(ctx, c.Group)
		if err != nil {
			return e.failErr("controller delete-group", err)
		}
		fmt.Fprintf(e.stdout, "deleted group %s: %d keys\n", c.Group, n)
		return exitOK
	}
	snap, err := store.Load(ctx, c.Group)
	if err != nil {
		return e.failErr("controller show-group", err)
	}
	return printGroup(e, c.Group, snap)
}

// groupView is show-group's JSON.
type groupView struct {
	Group    string           `json:"group"`
	Revision int64            `json:"revision"`
	State    controller.Group `json:"state"`
	Nodes    []nodeView       `json:"nodes"`
}

type nodeView struct {
	controller.Node
	Alive bool `json:"alive"`
}

func printGroup(e *env, group string, snap etcdstore.Snapshot) int {
	v := groupView{Group: group, Revision: snap.Revision, State: snap.State.Group.Normalize(), Nodes: []nodeView{}}
	ids := make([]int64, 0, len(snap.State.Nodes))
	for id := range snap.State.Nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		n := snap.State.Nodes[id]
		v.Nodes = append(v.Nodes, nodeView{Node: n, Alive: n.Alive})
	}
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return e.failErr("controller show-group", err)
	}
	return exitOK
}

// etcdLogger is the logger of the embedded member: etcd logs much at info
// level, so its lines show from warn on unless the log level is debug or
// trace.
func etcdLogger(e *env) hclog.Logger {
	lvl := hclog.LevelFromString(e.opts.global.LogLevel)
	if lvl == hclog.Info {
		lvl = hclog.Warn
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       "replicator.etcd",
		Level:      lvl,
		JSONFormat: e.opts.global.LogFormat == "json",
		Output:     e.stderr,
		Color:      hclog.ColorOff,
	})
}

func serveController(ctx context.Context, e *env, c *controllerOpts) int {
	log := e.log.Named("controller")
	if err := os.MkdirAll(c.Data, 0o700); err != nil {
		return e.failErr("controller", fmt.Errorf("data directory: %w", err))
	}
	if c.PeerListen != "" {
		if err := config.CheckAddr(c.PeerListen, true); err != nil {
			return e.failErr("controller", usage(fmt.Errorf("--peer-listen: %w", err)))
		}
	}
	if c.Supervise {
		// Check the supervisor's client options before starting.
		if _, err := c.Client.config(nil, e.log); err != nil {
			return e.failErr("controller", err)
		}
	}
	srv, err := embedetcd.Start(ctx, embedetcd.Config{
		Dir: c.Data, Name: c.Name, ClientAddr: c.Listen, PeerAddr: c.PeerListen,
		InitialCluster: c.Peers, Existing: c.Join, Logger: etcdLogger(e),
		TLSCert: c.TLSCert, TLSKey: c.TLSKey, TLSClientCA: c.TLSCA,
	})
	if err != nil {
		return e.failErr("controller", err)
	}
	members := c.Peers
	if members == "" {
		members = c.Name + " (alone)"
	}
	log.Info("controller store serving", "client_url", srv.ClientURL(), "name", c.Name, "members", members, "data", c.Data)
	stopSupervisor := func() {}
	if c.Supervise {
		var err error
		if stopSupervisor, err = startSupervisor(e, c, srv.ClientURL(), log); err != nil {
			srv.Close()
			return e.failErr("controller", err)
		}
	}
	code := exitOK
	select {
	case <-ctx.Done():
		log.Info("stopping the controller store")
	case err := <-srv.Err():
		log.Error("controller store failed", "error", err)
		code = exitError
	}
	// The supervisor's client goes first: etcd's graceful stop waits for
	// open streams.
	stopSupervisor()
	srv.Close()
	log.Info("controller store stopped")
	return code
}

// startSupervisor runs etcdstore.Supervise over every group through a
// client of the local member; the returned function stops it and waits.
func startSupervisor(e *env, c *controllerOpts, url string, log hclog.Logger) (func(), error) {
	cli, err := c.Client.dial(context.Background(), etcdLogger(e).Named("client"), url)
	if err != nil {
		return nil, fmt.Errorf("supervisor client: %w", err)
	}
	// etcd serves the default registry at /metrics on its client port:
	// the supervisor's metrics show there.
	store, err := etcdstore.New(etcdstore.Config{Client: cli, Prefix: c.Prefix, Logger: log,
		Options: controller.Options{UncleanElection: c.Unclean}, ElectionDelay: c.Delay, Registerer: prometheus.DefaultRegisterer})
	if err != nil {
		cli.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		store.Supervise(ctx, "", nil)
	}()
	log.Info("supervising groups", "prefix", c.Prefix, "election_delay", c.Delay, "unclean_election", c.Unclean)
	return func() {
		cancel()
		<-done
		cli.Close()
	}, nil
}
