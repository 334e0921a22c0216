package tcptransport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/transport"
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
	// ServerTLS, when set, makes Listen serve TLS: the classic HA bytes flow
	// unchanged inside it. It needs a certificate (Certificates or
	// GetCertificate). Handshakes run in the listener's goroutines, bounded
	// by ConnectTimeout, so a slow client never blocks Accept.
	ServerTLS *tls.Config
	// ClientTLS, when set, makes Dial speak TLS; the handshake completes
	// inside Dial, under the same deadline as the connect. An empty
	// ServerName is filled in from the dialed host.
	ClientTLS *tls.Config
	// Logger receives debug lines for dials and accepts and warnings for
	// socket options that could not be set. nil means no logs.
	Logger hclog.Logger
	// Registerer, when set, receives the transport's metrics:
	// replicator_transport_tcp_dials_total{result="ok"|"error"},
	// replicator_transport_tcp_accepts_total and
	// replicator_transport_tcp_tls_handshake_errors_total (server side).
	Registerer prometheus.Registerer
}

// DefaultOptions returns RocketMQ's socket settings: 5 s connect timeout,
// TCP_NODELAY on, SO_LINGER off, OS buffer sizes, keepalive 15 s, no TLS.
func DefaultOptions() Options {
	return Options{ConnectTimeout: DefaultConnectTimeout, KeepAlive: DefaultKeepAlive}
}

// Validate reports options that New would have to ignore.
func (o Options) Validate() error {
	if o.SendBufferSize < 0 || o.ReceiveBufferSize < 0 {
		return fmt.Errorf("tcptransport: negative socket buffer size (send %d, receive %d)", o.SendBufferSize, o.ReceiveBufferSize)
	}
	if o.ServerTLS != nil && len(o.ServerTLS.Certificates) == 0 && o.ServerTLS.GetCertificate == nil && o.ServerTLS.GetConfigForClient == nil {
		return errors.New("tcptransport: ServerTLS has no certificate")
	}
	return nil
}

// Transport is the default HA transport: real TCP, RocketMQ's socket
// settings, optional TLS. It is safe for concurrent use.
type Transport struct {
	opts    Options
	log     hclog.Logger
	dialOK  prometheus.Counter
	dialErr prometheus.Counter
	accepts prometheus.Counter
	// handshakeErr counts failed server-side TLS handshakes.
	handshakeErr prometheus.Counter
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
	}
	if opts.ConnectTimeout == 0 {
		opts.ConnectTimeout = DefaultConnectTimeout
	}
	if opts.KeepAlive == 0 {
		opts.KeepAlive = DefaultKeepAlive
	}
	t := &Transport{opts: opts, log: log}
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
	if r := opts.Registerer; r != nil {
		dials = register(r, dials, log)
		accepts = register(r, accepts, log)
		hsErr = register(r, hsErr, log)
	}
	t.handshakeErr = hsErr
	t.dialOK, t.dialErr, t.accepts = dials.WithLabelValues("ok"), dials.WithLabelValues("error"), accepts
	return t
}

// register registers c, or reuses the collector already registered under the
// same descriptor (several transports may share a registry).
func register[C prometheus.Collector](r prometheus.Registerer, c C, log hclog.Logger) C {
	if err := r.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
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
	t.log.Debug("listening", "addr", ln.Addr().String(), "tls", t.opts.ServerTLS != nil)
	l := &listener{TCPListener: ln.(*net.TCPListener), t: t}
	if t.opts.ServerTLS != nil {
		return newTLSListener(l, t.opts.ServerTLS), nil
	}
	return l, nil
}

type listener struct {
	*net.TCPListener
	t *Transport
}

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
		if err := l.t.tune(c); err != nil {
			l.t.log.Warn("closing accepted connection: socket options", "remote", c.RemoteAddr().String(), "error", err)
			c.Close()
			continue
		}
		l.t.accepts.Inc()
		l.t.log.Debug("accepted", "remote", c.RemoteAddr().String())
		return c, nil
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
	backoff := 5 * time.Millisecond
	for {
		c, err := l.inner.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select { // a transient error (EMFILE...): report it, back off, go on
			case l.errs <- err:
			case <-l.done:
				return
			}
			select {
			case <-time.After(backoff):
			case <-l.done:
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
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
	tc := tls.Server(c, l.cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		t.handshakeErr.Inc()
		if l.ctx.Err() == nil {
			t.log.Warn("TLS handshake failed", "remote", c.RemoteAddr().String(), "error", err)
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
		return nil, err
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
