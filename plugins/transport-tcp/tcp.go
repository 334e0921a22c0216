package tcptransport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/internal/backoff"
	"github.com/replicatorhq/replicator/transport"

	"github.com/replicatorhq/replicator/internal/promreg"
)

// Defaults, as RocketMQ's HA sockets.
const (
	// DefaultConnectTimeout is RocketMQ's slave connect timeout.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultKeepAlive is the TCP keepalive probe period (Go's default).
	DefaultKeepAlive = 15 * time.Second
)

// Options configure a Transport. The zero value is valid and equals
// DefaultOptions() without a logger or metrics.
type Options struct {
	// ConnectTimeout bounds Dial (TCP connect plus the TLS handshake) when
	// the caller's ctx has no earlier deadline. 0 means
	// DefaultConnectTimeout; negative means no bound besides ctx.
	ConnectTimeout time.Duration
	// KeepAlive is the TCP keepalive period on dialed and accepted
	// connections. 0 means DefaultKeepAlive; negative turns keepalive off.
	KeepAlive time.Duration
	// DisableNoDelay turns Nagle's algorithm back on. RocketMQ sets
	// TCP_NODELAY on both ends, and so does the default.
	DisableNoDelay bool
	// SendBufferSize and ReceiveBufferSize set SO_SNDBUF and SO_RCVBUF in
	// bytes on every connection; 0 keeps the OS default (RocketMQ's default).
	// RocketMQ applies its send property to the receive buffer and vice
	// versa; this transport does not copy that quirk.
	SendBufferSize    int
	ReceiveBufferSize int
	// Security holds TLS, the allow lists, the connection limits and the
	// transfer rate (transport.Security, whose fields Options promotes:
	// o.ServerTLS, o.Allow, o.MaxConns ...). What this transport adds to
	// their meaning: TLS handshakes of Listen run in the listener's
	// goroutines, bounded by ConnectTimeout, so a slow client never blocks
	// Accept, and a client's handshake runs under Dial's connect deadline; a
	// connection refused by Allow, MaxConns or MaxConnsPerIP is closed with
	// one warning and a count in
	// replicator_transport_tcp_refused_total{reason="not_allowed"|
	// "max_conns"|"max_conns_per_ip"}, one refused by AllowClientNames is
	// logged and counted as a handshake error; a connection throttled by
	// MaxTransferRate writes in chunks of at most 64 KiB, without vectored
	// writes.
	transport.Security
	// Logger receives debug lines for dials and accepts, warnings for
	// refused connections and failed server handshakes (at most one per
	// reason and address per RefusalLogInterval, with a count of the
	// suppressed ones), and warnings for socket
	// options that could not be set. nil means no logs.
	Logger hclog.Logger
	// Registerer, when set, receives the transport's metrics:
	// replicator_transport_tcp_dials_total{result="ok"|"error"},
	// replicator_transport_tcp_accepts_total,
	// replicator_transport_tcp_refused_total{reason},
	// replicator_transport_tcp_open_connections (accepted, not yet closed;
	// tracked only with MaxConns or MaxConnsPerIP) and
	// replicator_transport_tcp_tls_handshake_errors_total (server side).
	Registerer prometheus.Registerer
}

// refusalHint tells the operator what a refusal reason means.
var refusalHint = map[string]string{
	RefusedNotAllowed:    "the address is not in --ha-allow",
	RefusedMaxConns:      "--ha-max-conns connections are open",
	RefusedMaxConnsPerIP: "--ha-max-conns-per-ip connections are open from this address",
}

// Reasons of replicator_transport_tcp_refused_total.
const (
	RefusedNotAllowed    = "not_allowed"
	RefusedMaxConns      = "max_conns"
	RefusedMaxConnsPerIP = "max_conns_per_ip"
)

// DefaultOptions returns RocketMQ's socket settings: 5 s connect timeout,
// TCP_NODELAY on, SO_LINGER off, OS buffer sizes, keepalive 15 s, no TLS.
func DefaultOptions() Options {
	return Options{ConnectTimeout: DefaultConnectTimeout, KeepAlive: DefaultKeepAlive}
}

// Validate reports options that New would have to ignore: a negative
// socket buffer size, or a Security that transport.Security.Validate
// refuses.
func (o Options) Validate() error {
	if o.SendBufferSize < 0 || o.ReceiveBufferSize < 0 {
		return fmt.Errorf("tcptransport: negative socket buffer size (send %d, receive %d)", o.SendBufferSize, o.ReceiveBufferSize)
	}
	return o.Security.Validate()
}

// ParseAllow parses a list of IP addresses and CIDR prefixes ("10.0.0.7",
// "10.0.0.0/24", "fd00::/8") for Options.Allow. Prefixes are masked
// ("10.0.0.7/24" means 10.0.0.0/24).
func ParseAllow(items []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, it := range items {
		it = strings.TrimSpace(it)
		if it == "" {
			continue
		}
		if strings.Contains(it, "/") {
			p, err := netip.ParsePrefix(it)
			if err != nil {
				return nil, fmt.Errorf("tcptransport: %q is not an IP address or CIDR prefix", it)
			}
			if p.Addr().Is4In6() {
				if p.Bits() < 96 {
					return nil, fmt.Errorf("tcptransport: %q: IPv4-mapped prefix shorter than /96", it)
				}
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(it)
		if err != nil {
			return nil, fmt.Errorf("tcptransport: %q is not an IP address or CIDR prefix", it)
		}
		a = a.Unmap().WithZone("")
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// allowed reports whether Options.Allow lets a peer at a connect.
func (o *Options) allowed(a netip.Addr) bool {
	if len(o.Allow) == 0 {
		return true
	}
	a = a.Unmap().WithZone("")
	for _, p := range o.Allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// verifyClientName returns a tls.Config.VerifyConnection that requires the
// verified client certificate's common name or a DNS name to be in names.
func verifyClientName(names []string, prev func(tls.ConnectionState) error) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if prev != nil {
			if err := prev(cs); err != nil {
				return err
			}
		}
		if len(cs.PeerCertificates) == 0 {
			return errors.New("tcptransport: no client certificate")
		}
		leaf := cs.PeerCertificates[0]
		if slices.Contains(names, leaf.Subject.CommonName) {
			return nil
		}
		for _, dns := range leaf.DNSNames {
			if slices.Contains(names, dns) {
				return nil
			}
		}
		return fmt.Errorf("tcptransport: client certificate (common name %q, DNS names %q) is not in the allowed client names", leaf.Subject.CommonName, leaf.DNSNames)
	}
}

// Transport is the default HA transport: real TCP, RocketMQ's socket
// settings, optional TLS. It is safe for concurrent use.
type Transport struct {
	opts    Options
	log     hclog.Logger
	dialOK  prometheus.Counter
	dialErr prometheus.Counter
	accepts prometheus.Counter
	refused *prometheus.CounterVec
	open    prometheus.Gauge
	// handshakeErr counts failed server-side TLS handshakes.
	handshakeErr prometheus.Counter
	// logLimit rate-limits the WARN lines of refused connections and
	// failed handshakes (RefusalLogInterval per reason and address).
	logLimit *logLimiter
}

var _ transport.Transport = (*Transport)(nil)

// New returns a Transport. Zero fields of opts take their defaults; invalid
// ones (see Validate) are ignored with a warning.
func New(opts Options) *Transport {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	log = log.Named("tcp")
	if err := opts.Validate(); err != nil {
		log.Warn("ignoring invalid transport options", "error", err)
		opts.SendBufferSize = max(opts.SendBufferSize, 0)
		opts.ReceiveBufferSize = max(opts.ReceiveBufferSize, 0)
		opts.MaxConns = max(opts.MaxConns, 0)
		opts.MaxConnsPerIP = max(opts.MaxConnsPerIP, 0)
		opts.MaxTransferRate = max(opts.MaxTransferRate, 0)
		opts.Allow = slices.DeleteFunc(slices.Clone(opts.Allow), func(p netip.Prefix) bool { return !p.IsValid() })
		if opts.ServerTLS == nil || opts.ServerTLS.ClientAuth != tls.RequireAndVerifyClientCert {
			opts.AllowClientNames = nil
		}
	}
	if opts.ConnectTimeout == 0 {
		opts.ConnectTimeout = DefaultConnectTimeout
	}
	if opts.KeepAlive == 0 {
		opts.KeepAlive = DefaultKeepAlive
	}
	t := &Transport{opts: opts, log: log, logLimit: newLogLimiter(RefusalLogInterval, time.Now)}
	dials := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "replicator_transport_tcp_dials_total",
		Help: "HA connections dialed, by result.",
	}, []string{"result"})
	accepts := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "replicator_transport_tcp_accepts_total",
		Help: "HA connections accepted.",
	})
	hsErr := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "replicator_transport_tcp_tls_handshake_errors_total",
		Help: "Accepted HA connections dropped because the TLS handshake failed.",
	})
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "replicator_transport_tcp_refused_total",
		Help: "HA connections closed at accept, by reason: not_allowed (not in the allow list), max_conns, max_conns_per_ip.",
	}, []string{"reason"})
	open := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "replicator_transport_tcp_open_connections",
		Help: "Accepted HA connections not yet closed (tracked when a connection limit is set).",
	})
	if r := opts.Registerer; r != nil {
		dials = register(r, dials, log)
		accepts = register(r, accepts, log)
		hsErr = register(r, hsErr, log)
		refused = register(r, refused, log)
		open = register(r, open, log)
	}
	for _, reason := range []string{RefusedNotAllowed, RefusedMaxConns, RefusedMaxConnsPerIP} {
		refused.WithLabelValues(reason)
	}
	t.refused, t.open = refused, open
	t.handshakeErr = hsErr
	t.dialOK, t.dialErr, t.accepts = dials.WithLabelValues("ok"), dials.WithLabelValues("error"), accepts
	return t
}

// register registers c, or reuses the collector already registered under the
// same descriptor (several transports may share a registry).
func register[C prometheus.Collector](r prometheus.Registerer, c C, log hclog.Logger) C {
	c, err := promreg.Register(r, c)
	if err != nil {
		log.Warn("metrics not registered", "error", err)
	}
	return c
}

// Options returns the effective options.
func (t *Transport) Options() Options { return t.opts }

// Listen opens a TCP listener on addr ("host:port"; port 0 picks one).
// SO_REUSEADDR is set, as RocketMQ's master does (Go's default on Unix).
// Accepted connections get TCP_NODELAY, SO_LINGER off, keepalive and the
// configured buffer sizes. Accept returns *net.TCPConn, so
// transport.FrameWriter's vectored writes become writev. With ServerTLS,
// Accept returns *tls.Conn whose handshake has completed: each handshake
// runs in a goroutine of the listener, bounded by ConnectTimeout, and a
// failed one is logged, counted and dropped; Close aborts those in progress
// and waits for them.
func (t *Transport) Listen(addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: t.opts.KeepAlive}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tcptransport: listen %s: %w", addr, err)
	}
	t.log.Debug("listening", "addr", ln.Addr().String(), "tls", t.opts.ServerTLS != nil,
		"allow", len(t.opts.Allow), "max_conns", t.opts.MaxConns, "max_conns_per_ip", t.opts.MaxConnsPerIP)
	l := &listener{TCPListener: ln.(*net.TCPListener), t: t, perIP: map[netip.Addr]int{}}
	if t.opts.ServerTLS != nil {
		cfg := t.opts.ServerTLS
		if len(t.opts.AllowClientNames) > 0 {
			cfg = cfg.Clone()
			cfg.VerifyConnection = verifyClientName(slices.Clone(t.opts.AllowClientNames), cfg.VerifyConnection)
		}
		return newTLSListener(l, cfg), nil
	}
	return l, nil
}

type listener struct {
	*net.TCPListener
	t *Transport

	mu    sync.Mutex // guards the counts below
	open  int
	perIP map[netip.Addr]int
}

// admit applies the allow list and the connection limits to a peer, and
// counts it as open when it passes. It returns the refusal reason, or "".
func (l *listener) admit(ip netip.Addr) string {
	o := &l.t.opts
	if !o.allowed(ip) {
		return RefusedNotAllowed
	}
	if o.MaxConns == 0 && o.MaxConnsPerIP == 0 {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if o.MaxConns > 0 && l.open >= o.MaxConns {
		return RefusedMaxConns
	}
	if o.MaxConnsPerIP > 0 && l.perIP[ip] >= o.MaxConnsPerIP {
		return RefusedMaxConnsPerIP
	}
	l.open++
	l.perIP[ip]++
	l.t.open.Inc()
	return ""
}

// release forgets one open connection of ip.
func (l *listener) release(ip netip.Addr) {
	l.mu.Lock()
	l.open--
	if n := l.perIP[ip] - 1; n > 0 {
		l.perIP[ip] = n
	} else {
		delete(l.perIP, ip)
	}
	l.mu.Unlock()
	l.t.open.Dec()
}

// trackedConn is an accepted connection counted against the limits until
// it is closed. It embeds *net.TCPConn, so every method of the TCP
// connection is promoted, including the one net.Buffers uses for writev.
type trackedConn struct {
	*net.TCPConn
	l    *listener
	ip   netip.Addr
	once sync.Once
}

// Close closes the connection and releases its place under the limits.
func (c *trackedConn) Close() error {
	err := c.TCPConn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}

// NetConn returns the underlying TCP connection (as tls.Conn.NetConn does).
func (c *trackedConn) NetConn() net.Conn { return c.TCPConn }

// Accept waits for the next connection. A connection whose socket options
// cannot be set is closed and skipped (with a warning), never returned as an
// error: the caller's accept loop keeps running. Errors are the listener's
// (net.ErrClosed after Close).
func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptTCP()
		if err != nil {
			return nil, err
		}
		ip := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap().WithZone("")
		if reason := l.admit(ip); reason != "" {
			l.t.refused.WithLabelValues(reason).Inc()
			if ok, n := l.t.logLimit.allow(reason + " " + ip.String()); ok {
				l.t.log.Warn("refusing HA connection", "remote", c.RemoteAddr().String(), "reason", reason,
					"hint", refusalHint[reason], "suppressed", n, "suppressed_window", RefusalLogInterval)
			}
			c.SetLinger(0) // reset: the refused peer holds no server-side state
			c.Close()
			continue
		}
		var out net.Conn = c
		if l.t.opts.MaxConns > 0 || l.t.opts.MaxConnsPerIP > 0 {
			out = &trackedConn{TCPConn: c, l: l, ip: ip}
		}
		if err := l.t.tune(c); err != nil {
			l.t.log.Warn("closing accepted connection: socket options", "remote", c.RemoteAddr().String(), "error", err)
			out.Close()
			continue
		}
		if r := l.t.opts.MaxTransferRate; r > 0 {
			out = &throttledConn{Conn: out, flow: newFlowBucket(r, time.Now, time.Sleep)}
		}
		l.t.accepts.Inc()
		l.t.log.Debug("accepted", "remote", c.RemoteAddr().String())
		return out, nil
	}
}

// tlsListener completes each server handshake in a goroutine of its own,
// bounded by ConnectTimeout, and hands out only connections whose handshake
// succeeded. A slow or failing client never blocks Accept.
type tlsListener struct {
	inner   *listener
	cfg     *tls.Config
	ready   chan net.Conn
	errs    chan error
	done    chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closeMu sync.Once
}

func newTLSListener(inner *listener, cfg *tls.Config) *tlsListener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &tlsListener{
		inner: inner, cfg: cfg,
		ready: make(chan net.Conn), errs: make(chan error),
		done: make(chan struct{}), ctx: ctx, cancel: cancel,
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

func (l *tlsListener) acceptLoop() {
	defer l.wg.Done()
	var bo backoff.Backoff
	for {
		c, err := l.inner.Accept()
		if err != nil {
			if backoff.Stopped(err, l.done) {
				return
			}
			select { // a transient error (EMFILE...): report it, back off, go on
			case l.errs <- err:
			case <-l.done:
				return
			}
			if !backoff.Sleep(bo.Next(), l.done) {
				return
			}
			continue
		}
		bo.Reset()
		l.wg.Add(1)
		go l.handshake(c)
	}
}

func (l *tlsListener) handshake(c net.Conn) {
	defer l.wg.Done()
	t := l.inner.t
	ctx := l.ctx
	if t.opts.ConnectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.opts.ConnectTimeout)
		defer cancel()
	}
	// Record the verdict of VerifyConnection (the allowed client names):
	// when Close cancels ctx as a refused handshake ends, HandshakeContext
	// returns the context's error instead, and the refusal must still be
	// logged.
	cfg := l.cfg
	var refused error
	if next := cfg.VerifyConnection; next != nil {
		cfg = cfg.Clone()
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			refused = next(cs)
			return refused
		}
	}
	tc := tls.Server(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		t.handshakeErr.Inc()
		if refused != nil {
			err = refused
		}
		// Quiet only for a handshake that Close aborted.
		aborted := refused == nil && l.ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, net.ErrClosed))
		if !aborted {
			key := "tls " + c.RemoteAddr().String()
			if ap, perr := netip.ParseAddrPort(c.RemoteAddr().String()); perr == nil {
				key = "tls " + ap.Addr().Unmap().String()
			}
			if ok, n := t.logLimit.allow(key); ok {
				t.log.Warn("TLS handshake failed", "remote", c.RemoteAddr().String(), "error", err,
					"suppressed", n, "suppressed_window", RefusalLogInterval)
			}
		}
		c.Close()
		return
	}
	select {
	case l.ready <- tc:
	case <-l.done:
		c.Close()
	}
}

// Accept returns the next connection whose TLS handshake completed.
func (l *tlsListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case err := <-l.errs:
		return nil, err
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.inner.Addr(), Err: net.ErrClosed}
	}
}

// Close stops accepting, aborts handshakes in progress and waits for the
// listener's goroutines. Accepted connections stay open.
func (l *tlsListener) Close() error {
	var err error
	l.closeMu.Do(func() {
		close(l.done)
		l.cancel()
		err = l.inner.Close()
		l.wg.Wait()
	})
	return err
}

func (l *tlsListener) Addr() net.Addr { return l.inner.Addr() }

// Dial connects to addr ("host:port"). The connect (and the TLS handshake,
// if ClientTLS is set) is bounded by ctx and by ConnectTimeout, whichever
// ends first; a timeout error matches context.DeadlineExceeded or is a
// net.Error with Timeout() true. The connection has TCP_NODELAY on,
// SO_LINGER off, keepalive and the configured buffer sizes.
func (t *Transport) Dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := t.dial(ctx, addr)
	if err != nil {
		t.dialErr.Inc()
		t.log.Debug("dial failed", "addr", addr, "error", err)
		return nil, fmt.Errorf("tcptransport: dial %s: %w", addr, err)
	}
	t.dialOK.Inc()
	t.log.Debug("connected", "addr", addr, "local", c.LocalAddr().String())
	return c, nil
}

func (t *Transport) dial(ctx context.Context, addr string) (net.Conn, error) {
	if t.opts.ConnectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.opts.ConnectTimeout)
		defer cancel()
	}
	d := net.Dialer{KeepAlive: t.opts.KeepAlive}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, deadlineErr(ctx, err)
	}
	c := nc.(*net.TCPConn)
	if err := t.tune(c); err != nil {
		c.Close()
		return nil, err
	}
	if t.opts.ClientTLS == nil {
		return c, nil
	}
	cfg := t.opts.ClientTLS
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			c.Close()
			return nil, err
		}
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("tls handshake: %w", err)
	}
	return tc, nil
}

// deadlineErr makes a connect that ran out of ctx's deadline report
// context.DeadlineExceeded: the socket's own deadline (the same instant)
// can fire before ctx's timer, and net then returns os.ErrDeadlineExceeded,
// which errors.Is does not match with the context's error.
func deadlineErr(ctx context.Context, err error) error {
	if !errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}

// tune applies RocketMQ's socket options to one connection.
func (t *Transport) tune(c *net.TCPConn) error {
	if err := c.SetNoDelay(!t.opts.DisableNoDelay); err != nil {
		return fmt.Errorf("TCP_NODELAY: %w", err)
	}
	// SO_LINGER off: Close returns at once and the OS sends what is queued.
	if err := c.SetLinger(-1); err != nil {
		return fmt.Errorf("SO_LINGER: %w", err)
	}
	if n := t.opts.SendBufferSize; n > 0 {
		if err := c.SetWriteBuffer(n); err != nil {
			return fmt.Errorf("SO_SNDBUF: %w", err)
		}
	}
	if n := t.opts.ReceiveBufferSize; n > 0 {
		if err := c.SetReadBuffer(n); err != nil {
			return fmt.Errorf("SO_RCVBUF: %w", err)
		}
	}
	return nil
}
