package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/replicatorhq/replicator/internal/config"
	"github.com/replicatorhq/replicator/internal/node"
	"github.com/replicatorhq/replicator/plugins/metadata"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/remoting"
	"github.com/replicatorhq/replicator/sdk/meta"
)

// RocketMQ remoting for metadata (package remoting, plugins/metadata
// remoting*.go): a master answers RocketMQ's SlaveSynchronize requests on
// --remoting-listen; a slave with --metadata-source remoting pulls its
// metadata from --master-remoting with SlaveSynchronize's rules.

// Defaults. RocketMQ's broker ports: listen port L (10911), VIP channel
// L - 2 (10909, where a slave fetches topics), HA port L + 1 (10912). So a
// master serves remoting on 127.0.0.1:10909 by default, and a slave
// derives the master's remoting address from --master as HA port - 3.
const (
	defaultRemotingListen     = "127.0.0.1:10909"
	remotingPortBelowHA       = 3
	defaultRemotingMaxConns   = "1024"
	defaultRemotingPerIP      = "64"
	defaultRemotingIdle       = "120s"  // RocketMQ serverChannelMaxIdleTimeSeconds
	defaultRemotingMaxFrame   = "16MiB" // RocketMQ com.rocketmq.remoting.frameMaxLength
	metadataSourceHTTP        = "http"
	metadataSourceRemoting    = "remoting"
	remotingListenOff         = "off"
	remotingMaxFrameSizeLimit = 256 << 20
)

// remotingOpts are the remoting options of master and slave.
type remotingOpts struct {
	// master
	Listen          []string
	listenSets      int // Set calls on --remoting-listen; the first is the default
	Allow           []string
	MaxConns, PerIP int
	Idle            time.Duration
	TLSCert, TLSKey string
	TLSClientCA     string
	MaxFrameSize    int64
	MetadataSource  string // slave: http | remoting
	MasterRemoting  string // slave
	MasterTLSCA     string // slave
	MasterTLSCert   string // slave
	MasterTLSKey    string // slave

	ns namesrvOpts // namesrv.go: master, slave, node
}

func checkRemotingListen(s string) error {
	if s == remotingListenOff {
		return nil
	}
	return config.CheckAddr(s, true)
}

// remotingListenValue is --remoting-listen: a comma-separated list (as
// config.CSV) that also tells the default from a value the user gave. The
// option has a default, which config applies first, so every Set after the
// first comes from a flag, the environment or the file.
type remotingListenValue struct{ r *remotingOpts }

func (v remotingListenValue) Set(s string) error {
	v.r.listenSets++
	for _, it := range strings.Split(s, ",") {
		if it = strings.TrimSpace(it); it == "" {
			continue
		}
		if err := checkRemotingListen(it); err != nil {
			return err
		}
		v.r.Listen = append(v.r.Listen, it)
	}
	return nil
}

func (v remotingListenValue) String() string { return strings.Join(v.r.Listen, ",") }

// Reset lets a later source replace the list.
func (v remotingListenValue) Reset() { v.r.Listen = nil }

// listenIsDefault reports whether --remoting-listen was left at its default.
func (r *remotingOpts) listenIsDefault() bool { return r.listenSets <= 1 }

// remotingServeOpts are the options of the remoting server; def is the
// default of --remoting-listen and when prefixes the help texts.
func remotingServeOpts(n *nodeOpts, def, when string) []*config.Option {
	r := &n.rem
	listenHelp := when + "comma-separated addresses where the master answers RocketMQ slaves' metadata requests over RocketMQ remoting (topics, consumer and delay offsets, subscription groups, request modes); \"off\" disables it"
	if def == defaultRemotingListen {
		listenHelp += "; the default, RocketMQ's VIP channel port, is skipped with a warning when another process holds it"
	}
	return []*config.Option{
		{Name: "remoting-listen", Meta: "LIST", Help: listenHelp, Default: def, Value: remotingListenValue{r}},
		{Name: "remoting-allow", Meta: "LIST", Help: when + "comma-separated IPs and CIDR prefixes allowed to connect to --remoting-listen (default: all)", Value: config.CSV(&r.Allow, checkAllow)},
		{Name: "remoting-max-conns", Meta: "N", Help: when + "remoting connections open at once; more are closed at accept (0: no limit)", Default: defaultRemotingMaxConns, Value: config.Int(&r.MaxConns, 0, 1<<20)},
		{Name: "remoting-max-conns-per-ip", Meta: "N", Help: when + "remoting connections open at once from one IP address (0: no limit)", Default: defaultRemotingPerIP, Value: config.Int(&r.PerIP, 0, 1<<20)},
		{Name: "remoting-idle-timeout", Meta: "DURATION", Help: when + "close a remoting connection that sent nothing this long", Default: defaultRemotingIdle, Value: config.Duration(&r.Idle, time.Millisecond, 24*time.Hour)},
		{Name: "remoting-tls-cert", Meta: "FILE", Help: when + "serve --remoting-listen over TLS with this PEM certificate (needs --remoting-tls-key)", Value: config.File(&r.TLSCert, true)},
		{Name: "remoting-tls-key", Meta: "FILE", Help: when + "PEM private key of --remoting-tls-cert", Value: config.File(&r.TLSKey, true)},
		{Name: "remoting-tls-client-ca", Meta: "FILE", Help: when + "require remoting client certificates signed by a CA in this PEM file (needs --remoting-tls-cert)", Value: config.File(&r.TLSClientCA, true)},
	}
}

// remotingFrameOpt is --remoting-max-frame-size, which bounds the frames
// the server reads and the answers the slave's source reads.
func remotingFrameOpt(n *nodeOpts, help string) *config.Option {
	return &config.Option{Name: "remoting-max-frame-size", Meta: "SIZE", Help: help, Default: defaultRemotingMaxFrame, Value: config.Size(&n.rem.MaxFrameSize, 1024, remotingMaxFrameSizeLimit)}
}

func remotingMasterOpts(n *nodeOpts) []*config.Option {
	return remotingServerOpts(n, defaultRemotingListen, "")
}

// remotingServerOpts are the options of a node that serves remoting and
// never pulls over it (a master, replicator node): the server's, the frame
// bound and the name-server registration.
func remotingServerOpts(n *nodeOpts, def, when string) []*config.Option {
	return append(append(remotingServeOpts(n, def, when),
		remotingFrameOpt(n, "largest remoting frame read, length field included (RocketMQ's limit is 16 MiB)")), namesrvOptions(n)...)
}

// remotingSlaveOpts are the slave's metadata source options and, for an
// autoswitch slave, the server it runs while it is a master (after a
// promote); off by default there (a promoted slave on a shared machine
// must not take a port nobody gave it).
func remotingSlaveOpts(n *nodeOpts) []*config.Option {
	r := &n.rem
	return append([]*config.Option{
		{Name: "metadata-source", Meta: "SOURCE", Help: "where the slave pulls metadata from: http (the master's API, --master-api) or remoting (RocketMQ remoting, --master-remoting; a RocketMQ master works too)", Default: metadataSourceHTTP, Value: config.Enum(&r.MetadataSource, metadataSourceHTTP, metadataSourceRemoting)},
		{Name: "master-remoting", Meta: "ADDR", Help: "the master's remoting address for --metadata-source remoting (default: the host of --master, HA port - 3, RocketMQ's VIP channel port)", Value: config.String(&r.MasterRemoting, false)},
		{Name: "master-remoting-tls-ca", Meta: "FILE", Help: "connect to --master-remoting over TLS, verifying it against the CAs in this PEM file", Value: config.File(&r.MasterTLSCA, true)},
		{Name: "master-remoting-tls-cert", Meta: "FILE", Help: "client certificate (PEM) for a remoting port that requires one (needs --master-remoting-tls-ca and --master-remoting-tls-key)", Value: config.File(&r.MasterTLSCert, true)},
		{Name: "master-remoting-tls-key", Meta: "FILE", Help: "PEM private key of --master-remoting-tls-cert", Value: config.File(&r.MasterTLSKey, true)},
		remotingFrameOpt(n, "largest remoting frame read, length field included: an answer from --master-remoting, a request on --remoting-listen (RocketMQ's limit is 16 MiB)"),
	}, append(remotingServeOpts(n, remotingListenOff, "autoswitch, while promoted: "), namesrvOptions(n)...)...)
}

// remotingNodeOpts are the remoting server options of a node whose role
// changes at run time (replicator node): the server runs while the node is
// the master, off by default. newRemotingWiring takes any role other than
// "master" and "slave" as such a node.
func remotingNodeOpts(n *nodeOpts) []*config.Option {
	return remotingServerOpts(n, remotingListenOff, "while this node is the master: ")
}

// defaultMasterRemoting derives the master's remoting address from its HA
// address: same host, HA port - 3.
func defaultMasterRemoting(haAddr string) string { return portBelow(haAddr, remotingPortBelowHA) }

// portBelow is addr with its port lowered by diff: same host ("" when addr
// does not parse or its port is not above diff).
func portBelow(addr string, diff int) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= diff {
		return ""
	}
	return net.JoinHostPort(host, strconv.Itoa(p-diff))
}

// remotingWiring is what the metadata extension needs to serve or pull
// metadata over remoting; built from the options when the node is
// configured, so that bad flags fail before anything starts.
type remotingWiring struct {
	// master
	listen   []string
	optional string // the default listen address: may be busy
	skipped  bool   // optional was busy and is not served (w.mu)
	tcpOpts  tcptransport.Options
	idle     time.Duration
	maxFrame int
	// slave
	addr string
	dial func(ctx context.Context, addr string) (net.Conn, error)

	mu     sync.Mutex
	server *remoting.Server
	ns     *namesrvWiring // namesrv.go; nil without --namesrv-addr
	wg     sync.WaitGroup
}

// newRemotingWiring checks the remoting options of role ("master",
// "slave", or any other name for a node whose role changes at run time).
// It returns nil when remoting is off: no --remoting-listen address (a
// master with "off", a slave or node left at its default) and, on a slave,
// --metadata-source http.
func newRemotingWiring(role string, o *nodeOpts) (*remotingWiring, error) {
	w := &remotingWiring{idle: o.rem.Idle, maxFrame: int(o.rem.MaxFrameSize)}
	if err := w.configureServer(role, o); err != nil {
		return nil, err
	}
	if role == "slave" {
		if err := w.configureSource(o); err != nil {
			return nil, err
		}
	}
	var err error
	if w.ns, err = newNamesrvWiring(role, o, w.listen); err != nil { // namesrv.go
		return nil, err
	}
	if len(w.listen) == 0 && w.addr == "" {
		return nil, nil
	}
	return w, nil
}

// configureServer sets the listen side from --remoting-*. A classic slave
// never becomes a master: an address given to it is a usage error.
func (w *remotingWiring) configureServer(role string, o *nodeOpts) error {
	r := &o.rem
	for _, a := range r.Listen {
		if a == remotingListenOff {
			if len(r.Listen) > 1 {
				return usage(errors.New(`--remoting-listen: "off" cannot be combined with addresses`))
			}
			return nil
		}
	}
	if len(r.Listen) == 0 {
		return nil
	}
	if role == "slave" && o.as.Protocol == "classic" {
		return usage(errors.New("--remoting-listen on a slave serves remoting after a promote: it needs --ha-protocol autoswitch"))
	}
	w.listen = r.Listen
	if role == "master" && r.listenIsDefault() && len(w.listen) == 1 && w.listen[0] == defaultRemotingListen {
		// The master's default: a busy port (a second master on the
		// machine) is a warning, not a failure.
		w.optional = defaultRemotingListen
	}
	allow, err := tcptransport.ParseAllow(r.Allow)
	if err != nil {
		return usage(fmt.Errorf("--remoting-allow: %w", err))
	}
	w.tcpOpts = tcptransport.DefaultOptions()
	w.tcpOpts.Allow, w.tcpOpts.MaxConns, w.tcpOpts.MaxConnsPerIP = allow, r.MaxConns, r.PerIP
	switch {
	case r.TLSCert != "" || r.TLSKey != "":
		if w.tcpOpts.ServerTLS, err = node.ServerTLS(r.TLSCert, r.TLSKey, r.TLSClientCA); err != nil {
			return usage(fmt.Errorf("--remoting-tls-cert/--remoting-tls-key/--remoting-tls-client-ca: %w", err))
		}
	case r.TLSClientCA != "":
		return usage(errors.New("--remoting-tls-client-ca needs --remoting-tls-cert and --remoting-tls-key (client certificates need TLS)"))
	}
	return nil
}

// configureSource sets the slave's source side from --metadata-source
// remoting and --master-remoting*.
func (w *remotingWiring) configureSource(o *nodeOpts) error {
	r := &o.rem
	if r.MetadataSource != metadataSourceRemoting {
		return nil
	}
	w.addr = r.MasterRemoting
	if w.addr == "" {
		if w.addr = defaultMasterRemoting(o.Master); w.addr == "" {
			return usage(fmt.Errorf("--master-remoting: cannot derive it from --master %q; set it", o.Master))
		}
	}
	if err := config.CheckAddr(w.addr, false); err != nil {
		return usage(fmt.Errorf("--master-remoting: %w", err))
	}
	opts := tcptransport.DefaultOptions()
	switch {
	case r.MasterTLSCA != "":
		host, _, _ := net.SplitHostPort(w.addr)
		var err error
		if opts.ClientTLS, err = node.ClientTLS(r.MasterTLSCA, r.MasterTLSCert, r.MasterTLSKey, host); err != nil {
			return usage(fmt.Errorf("--master-remoting-tls-ca/--master-remoting-tls-cert/--master-remoting-tls-key: %w", err))
		}
	case r.MasterTLSCert != "" || r.MasterTLSKey != "":
		return usage(errors.New("--master-remoting-tls-cert and --master-remoting-tls-key need --master-remoting-tls-ca (it turns TLS on)"))
	}
	w.dial = tcptransport.New(opts).Dial
	return nil
}

// serve serves the master's documents on every --remoting-listen address.
// A nil wiring does nothing.
func (w *remotingWiring) serve(env node.ExtensionEnv, src meta.Source) error {
	if w == nil || len(w.listen) == 0 {
		return nil
	}
	log := env.Logger.Named("remoting")
	srv, err := remoting.NewServer(remoting.ServerConfig{
		Handler:      metadata.NewRemotingHandler(src, env.Logger),
		MaxFrameSize: w.maxFrame,
		IdleTimeout:  w.idle,
		MetricCodes:  metadata.RemotingCodes(),
		Logger:       log,
		Registerer:   env.Registerer,
	})
	if err != nil {
		return err
	}
	opts := w.tcpOpts
	opts.Logger = log // refusals are logged; the HA port's transport owns the tcp metrics
	tr := tcptransport.New(opts)
	var lns []net.Listener
	for _, a := range w.listen {
		ln, err := tr.Listen(a)
		if err != nil && a == w.optional {
			log.Warn("cannot serve RocketMQ remoting on its default address; set --remoting-listen (or off)", "addr", a, "error", err)
			w.mu.Lock()
			w.skipped = true
			w.mu.Unlock()
			continue
		}
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			srv.Close()
			return fmt.Errorf("--remoting-listen: %w", err)
		}
		lns = append(lns, ln)
	}
	w.mu.Lock()
	w.server = srv
	w.mu.Unlock()
	for _, ln := range lns {
		log.Info("serving RocketMQ remoting (metadata)", "addr", ln.Addr().String(), "tls", opts.ServerTLS != nil,
			"max_conns", opts.MaxConns, "max_conns_per_ip", opts.MaxConnsPerIP, "allow", strings.Join(allowStrings(opts), ","))
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, remoting.ErrClosed) {
				log.Error("remoting listener stopped", "addr", ln.Addr().String(), "error", err)
			}
		}()
	}
	return nil
}

func allowStrings(o tcptransport.Options) []string {
	out := make([]string, len(o.Allow))
	for i, p := range o.Allow {
		out[i] = p.String()
	}
	return out
}

// source returns the slave's remoting Source and the local store to sync
// into, or nil when the slave pulls over HTTP. haAddr is the new master's
// HA address after a demote ("" at start: --master-remoting, or the one
// derived from --master): its remoting address is derived from it (HA
// port - 3) as at start without --master-remoting.
func (w *remotingWiring) source(st metadata.LocalStore, haAddr string) (meta.Source, metadata.LocalStore, error) {
	if w == nil || w.addr == "" {
		return nil, st, nil
	}
	addr := w.addr
	if haAddr != "" {
		if addr = defaultMasterRemoting(haAddr); addr == "" {
			return nil, nil, fmt.Errorf("--metadata-source remoting: cannot derive the new master's remoting address from %q", haAddr)
		}
	}
	src, err := metadata.NewRemotingSource(metadata.RemotingSourceConfig{Addr: addr, Dial: w.dial, MaxFrameSize: w.maxFrame})
	if err != nil {
		return nil, nil, fmt.Errorf("--master-remoting: %w", err)
	}
	return src, metadata.TakeEveryRound(st, metadata.UnversionedNames()...), nil
}

// close stops the server and waits for its listeners.
func (w *remotingWiring) close() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	srv := w.server
	w.server = nil
	w.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	w.wg.Wait()
	return nil
}

// defaultSkipped reports whether serve skipped the default listen address
// because another process held it.
func (w *remotingWiring) defaultSkipped() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.skipped
}

// serving reports whether the remoting server runs.
func (w *remotingWiring) serving() bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.server != nil
}
