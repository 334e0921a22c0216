package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/replicatorhq/replicator/controller"
	"github.com/replicatorhq/replicator/controller/etcdstore"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/config"
	"github.com/replicatorhq/replicator/internal/node"
	"github.com/replicatorhq/replicator/internal/pluginhost"
)

// nodeCmdOpts are the options of `replicator node`: a node of a
// controller-mode group (controller/member through internal/node).
type nodeCmdOpts struct {
	n            nodeOpts // the master and slave options that apply
	Client       controllerClient
	Group        string
	Prefix       string
	LeaseTTL     time.Duration
	HAAdvertise  string
	APIAdvertise string
	Supervise    bool
	Delay        time.Duration
}

// Defaults of the node command.
const (
	defaultLeaseTTL = "3s" // member.DefaultLeaseTTL
	// defaultElectionDelay is the supervisor's wait after a master's lease
	// expired. The old master fenced itself half a TTL before the expiry,
	// so the margin between its last put and the next master's first is
	// TTL/2 + the delay (2.5 s with the defaults), and a kill -9 failover
	// takes about TTL + delay + a heartbeat: under 2 x TTL.
	defaultElectionDelay = "1s"
	minLeaseTTL          = time.Second
	maxLeaseTTL          = time.Minute
)

func nodeCommand(c *nodeCmdOpts) *config.Command {
	o := &c.n
	opts := []*config.Option{
		{Name: "group", Meta: "NAME", Help: "the replica group this node belongs to", Value: config.String(&c.Group, false), Required: true},
		{Name: "broker-id", Meta: "N", Help: "this node's broker id in the group, 1 or more (unique in the group)", Value: config.Int64(&o.as.BrokerID, 1, maxBrokerID), Required: true},
		{Name: "data", Meta: "DIR", Help: "data directory; the commit log goes in DIR/commitlog", Default: "./data/node", Value: config.String(&o.Data, true)},
		{Name: "listen", Meta: "ADDR", Help: "HTTP API and metrics address", Default: defaultListen, Value: config.Addr(&o.Listen, true)},
		{Name: "ha-listen", Meta: "ADDR", Help: "HA address (a fixed port): slaves connect here while this node is the master", Default: defaultHAListen, Value: config.Addr(&o.HAListen, true)},
		{Name: "ha-advertise", Meta: "HOST:PORT", Help: "HA address registered with the controller for the slaves to dial (default: --ha-listen; required when it listens on all interfaces)", Value: config.Addr(&c.HAAdvertise, false)},
		{Name: "api-advertise", Meta: "URL", Help: "API base URL registered with the controller for clients (403 answers, status; default: http(s):// and --listen; required when it listens on all interfaces)", Value: config.URL(&c.APIAdvertise, true)},
		{Name: "lease-ttl", Meta: "DURATION", Help: "TTL of the node's registration lease: a master that cannot renew it fences itself after half of it, and the group elects another master once it expired (etcd counts whole seconds, at least its minimum, 2s by default)", Default: defaultLeaseTTL, Value: config.Duration(&c.LeaseTTL, minLeaseTTL, maxLeaseTTL)},
		{Name: "supervise", Help: "also elect a new master for this group when its master's registration ends (needed on an etcd cluster without a replicator controller; any number of supervisors may run)", Default: "true", Value: config.Bool(&c.Supervise)},
		{Name: "election-delay", Meta: "DURATION", Help: "with --supervise: elect this long after the master's lease expired (a margin over the master's fence at half its TTL)", Default: defaultElectionDelay, Value: config.Duration(&c.Delay, 0, 10*time.Minute)},
		{Name: "controller-prefix", Meta: "PREFIX", Help: "root of the controller's key space (as the controller's --prefix)", Default: etcdstore.DefaultPrefix, Value: config.String(&c.Prefix, true)},
		{Name: "replication", Meta: "MODE", Help: "replication while this node is the master: async or sync (a sync put waits for every member of the in-sync set, unless --sync-acks)", Default: "async", Value: config.Enum(&o.Replication, "async", "sync")},
		{Name: "slave-timeout", Meta: "DURATION", Help: "sync replication: how long a put waits for slaves", Default: "5s", Value: config.Duration(&o.SlaveTimeout, time.Millisecond, 10*time.Minute)},
		{Name: "sync-acks", Meta: "N", Help: "sync replication: slaves that must hold a message (default: every in-sync slave; fewer gives up the guarantee that the elected node holds every PUT_OK message)", Value: config.Int(&o.SyncAcks, 1, 64)},
		{Name: "max-lag", Meta: "SIZE", Help: "async replication: a put waits (at most --slave-timeout) while a slave is more than SIZE behind (0: never)", Default: "0", Value: config.Size(&o.MaxLag, 0, 1<<40)},
		{Name: "flush", Meta: "MODE", Help: "disk flush: async (ASYNC_FLUSH) or sync (SYNC_FLUSH)", Default: "async", Value: config.Enum(&o.Flush, "async", "sync")},
		{Name: "max-message-size", Meta: "SIZE", Help: "largest message body accepted (a put with a larger body answers 413)", Default: "4MiB", Value: config.Size(&o.MaxMessageSize, 1, 256<<20)},
		{Name: "reconnect-delay", Meta: "DURATION", Help: "as a slave: wait before reconnecting to the master after a failure", Default: "5s", Value: config.Duration(&o.ReconnectDelay, time.Millisecond, time.Hour)},
		{Name: "metadata-interval", Meta: "DURATION", Help: "as a slave: how often to pull the master's metadata", Default: "10s", Value: config.Duration(&o.MetadataInterval, 10*time.Millisecond, 24*time.Hour)},
		{Name: "ha-max-time-slave-not-catchup", Meta: "DURATION", Help: "as the master: a slave that has not caught up for this long leaves the in-sync set", Default: "15s", Value: config.Duration(&o.as.MaxTimeNotCatchup, 100*time.Millisecond, time.Hour)},
		{Name: "read-confirmed", Help: "as a slave: serve reads only up to the confirm offset (bytes every in-sync replica holds)", Value: config.Bool(&o.as.ReadConfirmed)},
		{Name: "sync-from-last-file", Help: "as a slave: an empty replica starts at the master's last segment instead of its first byte", Value: config.Bool(&o.as.SyncFromLastFile)},
		{Name: "async-learner", Help: "as a slave: replicate but never join the in-sync set (never elected)", Value: config.Bool(&o.as.AsyncLearner)},
		{Name: "ha-tls-cert", Meta: "FILE", Help: "HA over TLS: this PEM certificate serves the HA port, and is the client certificate shown to other masters (needs --ha-tls-key)", Value: config.File(&o.sec.HATLSCert, true)},
		{Name: "ha-tls-key", Meta: "FILE", Help: "PEM private key of --ha-tls-cert", Value: config.File(&o.sec.HATLSKey, true)},
		{Name: "ha-tls-client-ca", Meta: "FILE", Help: "as the master: require slave certificates signed by a CA in this PEM file (needs --ha-tls-cert)", Value: config.File(&o.sec.HATLSClientCA, true)},
		{Name: "ha-tls-ca", Meta: "FILE", Help: "as a slave: connect to the master over TLS, verifying it against the CAs in this PEM file", Value: config.File(&o.sec.HATLSCA, true)},
		{Name: "ha-tls-server-name", Meta: "NAME", Help: "as a slave: name to verify in the master's certificate (default: the host of its HA address)", Value: config.String(&o.sec.HATLSServerName, false)},
		{Name: "ha-allow", Meta: "LIST", Help: "comma-separated IPs and CIDR prefixes allowed to connect to the HA port (default: all)", Value: config.CSV(&o.sec.HAAllow, checkAllow)},
		{Name: "ha-allow-cn", Meta: "LIST", Help: "comma-separated client-certificate names allowed on the HA port (needs --ha-tls-client-ca)", Value: config.CSV(&o.sec.HAAllowCN, nil)},
		{Name: "ha-max-conns", Meta: "N", Help: "HA connections open at once (0: no limit)", Default: defaultHAMaxConns, Value: config.Int(&o.sec.HAMaxConns, 0, 1<<20)},
		{Name: "ha-max-conns-per-ip", Meta: "N", Help: "HA connections open at once from one IP address (0: no limit)", Default: defaultHAMaxConnsPerIP, Value: config.Int(&o.sec.HAMaxConnsPerIP, 0, 1<<20)},
	}
	opts = append(opts, controllerClientOptions(&c.Client)...)
	opts = append(opts, apiSecurityOpts(&o.sec)...)
	opts = append(opts, storeOpts(o, "every node of the group")...)
	opts = append(opts, limitOpts(&o.limits, true)...)
	opts = append(opts, remotingNodeOpts(o)...)
	return &config.Command{
		Name:     "node",
		Synopsis: "run a node of a controller-mode group: the controller (etcd) elects its master",
		Help: `Run a node of the replica group --group whose role the controller decides
(RocketMQ 5's controller mode, on etcd: replicator controller, or an
existing etcd cluster at --controller). The node registers on an etcd lease
of --lease-ttl, reports its epoch and max offset, and follows the group's
state: the elected master takes puts and ships its commit log on
--ha-listen with the autoswitch HA protocol; the others follow it, truncate
what the master does not hold and serve reads. A master that cannot renew
its lease fences itself (puts answer 503) after half the TTL; once the lease
expired the controller elects another member of the in-sync set, at a
higher epoch. Puts on a slave answer 403 with the master's API address
(master_api, Location). POST /v1/role answers 409: the controller decides.

SIGINT or SIGTERM stops the node gracefully: it leaves the group first
(a master fences itself and revokes its lease, so the group elects at
once), then finishes in-flight requests and closes the commit log.`,
		Options: opts,
	}
}

// runNodeCmd runs `replicator node` until ctx is done.
func runNodeCmd(ctx context.Context, e *env) int {
	c := &e.opts.node
	cfg, err := nodeCmdConfig(e, c)
	if err != nil {
		return e.failErr("node", err)
	}
	ecfg, err := c.Client.config(c.Client.Endpoints, etcdLogger(e).Named("client"))
	if err != nil {
		return e.failErr("node", err)
	}
	// Non-blocking dial: the node starts while the controller is down and
	// registers once it answers (the member retries).
	ecfg.DialTimeout = 0
	ecfg.DialKeepAliveTime, ecfg.DialKeepAliveTimeout = c.LeaseTTL/2, c.LeaseTTL/2
	cli, err := clientv3.New(ecfg)
	if err != nil {
		return e.failErr("node", fmt.Errorf("controller client %v: %w", c.Client.Endpoints, err))
	}
	defer cli.Close()
	store, err := etcdstore.New(etcdstore.Config{Client: cli, Prefix: c.Prefix, ElectionDelay: c.Delay, Logger: e.log.Named("controller")})
	if err != nil {
		return e.failErr("node", err)
	}
	cfg.Controller.Store = store
	return e.runNodeConfig(ctx, "node", cfg)
}

// unspecifiedHost reports whether addr listens on every interface.
func unspecifiedHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// nodeCmdConfig turns the options of the node command into a node
// configuration (its Controller.Store is set by the caller): check the
// options, load the plugins, map the options, load the security files,
// build the extensions.
func nodeCmdConfig(e *env, c *nodeCmdOpts) (node.Config, error) {
	if err := e.checkNodeCmd(c); err != nil {
		return node.Config{}, usage(err)
	}
	ps, err := e.loadPlugins() // plugins.go; load failures are logged, not fatal
	if ps == nil {
		return node.Config{}, err
	}
	e.plugins = ps
	cfg := nodeCmdBaseConfig(e, c, ps.reg)
	if err := e.nodeCmdSecurity(&c.n.sec, &cfg); err != nil {
		return cfg, usage(err)
	}
	applyLimits(&c.n.limits, &cfg)
	// Extensions start without a role and follow the role changes the
	// controller makes.
	cfg.Extensions, err = ps.extensions("node", &c.n)
	return cfg, err
}

// checkNodeCmd checks the node command's options against each other and
// settles the defaults that depend on others (--sync-acks: every in-sync
// slave; --max-message-size: at most half a segment).
func (e *env) checkNodeCmd(c *nodeCmdOpts) error {
	o := &c.n
	set := func(name string) bool {
		src, ok := e.sources[name]
		return ok && src != config.SourceDefault
	}
	if err := etcdstore.ValidGroup(c.Group); err != nil {
		return fmt.Errorf("--group: %w", err)
	}
	if o.HAListen == o.Listen {
		return fmt.Errorf("--ha-listen and --listen are the same address %s", o.Listen)
	}
	if _, port, _ := net.SplitHostPort(o.HAListen); port == "0" {
		return errors.New("--ha-listen needs a fixed port: it is registered with the controller")
	}
	if c.HAAdvertise == "" && unspecifiedHost(o.HAListen) {
		return fmt.Errorf("--ha-listen %s listens on every interface: set --ha-advertise to the address the other nodes dial", o.HAListen)
	}
	// The name servers get the HA address the other nodes dial.
	o.rem.ns.HAAdvertise = c.HAAdvertise
	if c.APIAdvertise == "" && unspecifiedHost(o.Listen) {
		return fmt.Errorf("--listen %s listens on every interface: set --api-advertise to the URL clients use", o.Listen)
	}
	if !set("sync-acks") {
		o.SyncAcks = 0 // every in-sync slave
	}
	if o.MaxMessageSize > o.SegmentSize/2 {
		if set("max-message-size") {
			return fmt.Errorf("--max-message-size %s must be at most half of --segment-size %s",
				config.FormatSize(o.MaxMessageSize), config.FormatSize(o.SegmentSize))
		}
		o.MaxMessageSize = o.SegmentSize / 2
	}
	return nil
}

// nodeCmdBaseConfig maps the node command's checked options to a node
// configuration: always autoswitch, the replication as a master, the
// controller's settings.
func nodeCmdBaseConfig(e *env, c *nodeCmdOpts, reg *pluginhost.Registry) node.Config {
	o := &c.n
	role := core.AsyncMaster
	if o.Replication == "sync" {
		role = core.SyncMaster
	}
	return node.Config{
		Role:                   role,
		PromoteRole:            role,
		Protocol:               core.ProtocolAutoSwitch,
		DataDir:                o.Data,
		Listen:                 o.Listen,
		HAListen:               o.HAListen,
		SlaveTimeout:           o.SlaveTimeout,
		SyncAcks:               o.SyncAcks,
		MaxLag:                 o.MaxLag,
		SyncFlush:              o.Flush == "sync",
		MaxMessageSize:         o.MaxMessageSize,
		ReconnectDelay:         o.ReconnectDelay,
		SegmentSize:            o.SegmentSize,
		StorePlugin:            o.Store,
		TransportPlugin:        o.Transport,
		Registry:               reg,
		Logger:                 e.log,
		Version:                versionString(),
		BrokerID:               o.as.BrokerID,
		MaxTimeSlaveNotCatchup: o.as.MaxTimeNotCatchup,
		ReadConfirmed:          o.as.ReadConfirmed,
		SyncFromLastFile:       o.as.SyncFromLastFile,
		AsyncLearner:           o.as.AsyncLearner,
		Controller: &node.ControllerConfig{
			Group:        c.Group,
			LeaseTTL:     c.LeaseTTL,
			HAAdvertise:  c.HAAdvertise,
			APIAdvertise: c.APIAdvertise,
			Supervise:    c.Supervise,
		},
	}
}

// nodeCmdSecurity loads the API's TLS and token and the HA TLS of both
// sides: a node serves as a master and dials as a slave, so HA TLS needs
// both.
func (e *env) nodeCmdSecurity(sec *nodeSecurity, cfg *node.Config) error {
	// API TLS and token, the HA server's TLS and access control.
	if err := e.nodeSecurity("master", sec, cfg); err != nil {
		return err
	}
	switch {
	case sec.HATLSCA != "":
		var err error
		if cfg.HA.ClientTLS, err = node.ClientTLS(sec.HATLSCA, sec.HATLSCert, sec.HATLSKey, sec.HATLSServerName); err != nil {
			return fmt.Errorf("--ha-tls-ca/--ha-tls-cert/--ha-tls-key: %w", err)
		}
	case sec.HATLSServerName != "":
		return errors.New("--ha-tls-server-name needs --ha-tls-ca (it turns TLS on for the slave side)")
	}
	if (cfg.HA.ServerTLS == nil) != (cfg.HA.ClientTLS == nil) {
		return errors.New("HA TLS needs both sides on every node: --ha-tls-cert/--ha-tls-key (serving as the master) and --ha-tls-ca (following a master)")
	}
	return nil
}

// printControllerStatus prints the controller-mode part of a status: the
// group, its master and the node's registration. Nothing outside
// controller mode.
func printControllerStatus(w io.Writer, st api.Status) {
	if st.Controller == nil {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "group\t%s\n", st.Group)
	switch {
	case st.MasterBrokerID == nil || *st.MasterBrokerID == controller.NoMaster:
		reason := st.Controller.NoMasterReason
		if reason == "" {
			reason = "none elected yet"
		}
		fmt.Fprintf(tw, "group master\tNONE (%s)\n", reason)
	case *st.MasterBrokerID == st.BrokerID:
		fmt.Fprintf(tw, "group master\t%d (this node)\n", *st.MasterBrokerID)
	default:
		api := st.MasterAPI
		if api == "" {
			api = "API address unknown"
		}
		fmt.Fprintf(tw, "group master\t%d (%s)\n", *st.MasterBrokerID, api)
	}
	ids := make([]string, len(st.InSync))
	for i, id := range st.InSync {
		ids[i] = strconv.FormatInt(id, 10)
	}
	fmt.Fprintf(tw, "group in-sync set\t[%s] (set epoch %d)\n", strings.Join(ids, " "), st.Controller.InSyncEpoch)
	lease := "valid"
	switch {
	case !st.Controller.Registered:
		lease = "NOT REGISTERED (registering again when the controller answers)"
	case !st.Controller.LeaseValid:
		lease = "EXPIRED (a master refuses puts)"
	}
	fmt.Fprintf(tw, "controller lease\t%s\n", lease)
	tw.Flush()
}
