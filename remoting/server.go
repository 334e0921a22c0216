package remoting

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/internal/backoff"

	"github.com/replicatorhq/replicator/internal/promreg"
)

// Server defaults.
const (
	// DefaultIdleTimeout closes a connection that sent nothing this long
	// (RocketMQ serverChannelMaxIdleTimeSeconds = 120).
	DefaultIdleTimeout = 120 * time.Second
	// DefaultWriteTimeout bounds writing one response.
	DefaultWriteTimeout = 10 * time.Second
)

// Handler answers requests. ServeRemoting returns the response to req
// (NewResponse builds one), or nil to send none. The server sets the
// response's opaque, response bit and serialize type from req. req and its
// Body are valid only during the call. It is called from one goroutine per
// connection, for one request at a time per connection.
type Handler interface {
	ServeRemoting(ctx context.Context, req *Command) *Command
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req *Command) *Command

// ServeRemoting calls f.
func (f HandlerFunc) ServeRemoting(ctx context.Context, req *Command) *Command { return f(ctx, req) }

// ServerConfig configures NewServer.
type ServerConfig struct {
	// Handler answers the requests. REQUIRED.
	Handler Handler
	// MaxFrameSize bounds a request frame (0: DefaultMaxFrameSize).
	MaxFrameSize int
	// IdleTimeout closes a connection that sent nothing this long, or
	// whose frame did not arrive whole within it (0: DefaultIdleTimeout).
	IdleTimeout time.Duration
	// WriteTimeout bounds writing one response (0: DefaultWriteTimeout).
	WriteTimeout time.Duration
	// MetricCodes are the request codes counted under their own label in
	// replicator_remoting_requests_total; the others count as "other", so
	// a hostile client cannot grow the label set.
	MetricCodes []int32
	// Logger; nil means no logging.
	Logger hclog.Logger
	// Registerer receives the metrics; nil registers none. Collectors
	// already registered there (a server created again) are reused.
	Registerer prometheus.Registerer
}

// Error reasons of replicator_remoting_errors_total.
const (
	ReasonMalformed  = "malformed"
	ReasonTooLarge   = "frame_too_large"
	ReasonTruncated  = "truncated"
	ReasonIdle       = "idle_timeout"
	ReasonWrite      = "write"
	ReasonEncode     = "encode"
	ReasonReadFailed = "read"
)

type serverMetrics struct {
	requests *prometheus.CounterVec
	errors   *prometheus.CounterVec
	conns    prometheus.Counter
	open     prometheus.Gauge
}

func register[C prometheus.Collector](r prometheus.Registerer, c C) (C, error) {
	c, err := promreg.Register(r, c)
	if err != nil {
		return c, fmt.Errorf("remoting: register metrics: %w", err)
	}
	return c, nil
}

func newServerMetrics(r prometheus.Registerer) (*serverMetrics, error) {
	m := &serverMetrics{}
	var err error
	if m.requests, err = register(r, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "replicator_remoting_requests_total",
		Help: "RocketMQ remoting requests received, by request code (\"other\" for codes not served).",
	}, []string{"code"})); err != nil {
		return nil, err
	}
	if m.errors, err = register(r, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "replicator_remoting_errors_total",
		Help: "RocketMQ remoting connections closed on an error, by reason (malformed, frame_too_large, truncated, idle_timeout, read, write, encode).",
	}, []string{"reason"})); err != nil {
		return nil, err
	}
	if m.conns, err = register(r, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "replicator_remoting_connections_total",
		Help: "RocketMQ remoting connections accepted.",
	})); err != nil {
		return nil, err
	}
	if m.open, err = register(r, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "replicator_remoting_open_connections",
		Help: "RocketMQ remoting connections open now.",
	})); err != nil {
		return nil, err
	}
	return m, nil
}

// Server serves the remoting protocol on listeners: one goroutine per
// connection reads a request, calls the Handler, writes the response.
type Server struct {
	cfg     ServerConfig
	log     hclog.Logger
	metrics *serverMetrics
	ctx     context.Context
	cancel  context.CancelFunc

	mu     sync.Mutex
	closed bool
	lns    map[net.Listener]struct{}
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewServer validates cfg and registers the metrics.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Handler == nil {
		return nil, errors.New("remoting: ServerConfig.Handler is required")
	}
	if cfg.MaxFrameSize < 0 || cfg.IdleTimeout < 0 || cfg.WriteTimeout < 0 {
		return nil, errors.New("remoting: negative MaxFrameSize, IdleTimeout or WriteTimeout")
	}
	if cfg.MaxFrameSize == 0 {
		cfg.MaxFrameSize = DefaultMaxFrameSize
	}
	if cfg.MaxFrameSize < MinFrameSize {
		return nil, fmt.Errorf("remoting: MaxFrameSize %d below the minimum frame of %d bytes", cfg.MaxFrameSize, MinFrameSize)
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	m, err := newServerMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	for _, c := range cfg.MetricCodes {
		m.requests.WithLabelValues(strconv.Itoa(int(c)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{cfg: cfg, log: cfg.Logger, metrics: m, ctx: ctx, cancel: cancel,
		lns: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{}}, nil
}

// Serve accepts connections on ln until Close (then it returns ErrClosed)
// or until Accept fails for good. Serve may be called for several
// listeners. The server closes ln.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrClosed
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lns, ln)
		s.mu.Unlock()
		ln.Close()
	}()
	var bo backoff.Backoff
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.isClosed() {
				return ErrClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || isTemporary(err) {
				delay := bo.Next()
				s.log.Warn("remoting accept failed; retrying", "addr", ln.Addr().String(), "delay", delay, "error", err)
				if !backoff.Sleep(delay, s.ctx.Done()) {
					return ErrClosed
				}
				continue
			}
			return fmt.Errorf("remoting: accept on %s: %w", ln.Addr(), err)
		}
		bo.Reset()
		if !s.track(c) {
			c.Close()
			return ErrClosed
		}
		s.metrics.conns.Inc()
		s.metrics.open.Inc()
		go func() {
			defer s.wg.Done()
			pprof.Do(s.ctx, pprof.Labels("component", "remoting-conn"), func(ctx context.Context) { s.serveConn(ctx, c) })
		}()
	}
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.metrics.open.Dec()
}

// serveConn runs one connection: read, handle, answer, until an error.
func (s *Server) serveConn(ctx context.Context, c net.Conn) {
	defer s.untrack(c)
	defer c.Close()
	peer := c.RemoteAddr().String()
	log := s.log.With("peer", peer)
	log.Debug("remoting connection accepted")
	r := NewReader(c, s.cfg.MaxFrameSize)
	var out []byte
	for {
		if err := c.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout)); err != nil {
			return
		}
		req, err := r.Read()
		if err != nil {
			s.readFailed(log, err)
			return
		}
		if req.IsResponse() {
			log.Debug("ignoring a response sent to the server", "code", req.Code, "opaque", req.Opaque)
			continue
		}
		s.metrics.requests.WithLabelValues(s.codeLabel(req.Code)).Inc()
		resp := s.cfg.Handler.ServeRemoting(ctx, req)
		if resp == nil || req.IsOneway() {
			continue
		}
		resp.Opaque = req.Opaque
		resp.Flag |= FlagResponse
		resp.Serialize = req.Serialize
		if out, err = AppendFrame(out[:0], resp); err != nil {
			s.metrics.errors.WithLabelValues(ReasonEncode).Inc()
			log.Error("cannot encode a remoting response; sending SYSTEM_ERROR", "code", req.Code, "error", err)
			out, _ = AppendFrame(out[:0], NewResponse(req, SystemError, "replicator could not encode the response"))
		}
		if err := c.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout)); err != nil {
			return
		}
		if _, err := c.Write(out); err != nil {
			if ctx.Err() == nil {
				s.metrics.errors.WithLabelValues(ReasonWrite).Inc()
				log.Warn("remoting write failed; closing the connection", "error", err)
			}
			return
		}
		if cap(out) > 64<<10 {
			out = nil
		}
	}
}

// readFailed logs why a connection ends, once, and counts errors.
func (s *Server) readFailed(log hclog.Logger, err error) {
	var ne net.Error
	switch {
	case s.ctx.Err() != nil:
	case errors.Is(err, io.EOF):
		log.Debug("remoting connection closed by the peer")
	case errors.Is(err, ErrFrameTooLarge):
		s.metrics.errors.WithLabelValues(ReasonTooLarge).Inc()
		log.Warn("remoting frame over the size bound; closing the connection", "max_frame_size", s.cfg.MaxFrameSize, "error", err)
	case errors.Is(err, ErrMalformed):
		s.metrics.errors.WithLabelValues(ReasonMalformed).Inc()
		log.Warn("malformed remoting frame; closing the connection", "error", err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		s.metrics.errors.WithLabelValues(ReasonTruncated).Inc()
		log.Warn("remoting connection ended inside a frame", "error", err)
	case errors.As(err, &ne) && ne.Timeout():
		s.metrics.errors.WithLabelValues(ReasonIdle).Inc()
		log.Info("remoting connection idle; closing it", "idle_timeout", s.cfg.IdleTimeout)
	default:
		s.metrics.errors.WithLabelValues(ReasonReadFailed).Inc()
		log.Warn("remoting read failed; closing the connection", "error", err)
	}
}

func (s *Server) codeLabel(code int32) string {
	if slices.Contains(s.cfg.MetricCodes, code) {
		return strconv.Itoa(int(code))
	}
	return "other"
}

// Close stops every Serve, closes every connection and waits for their
// goroutines. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}
