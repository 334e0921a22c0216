package api

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/replicatorhq/replicator/sdk/proto/producerv1"
)

// http2Preface is the client connection preface of HTTP/2 (RFC 9113 3.4).
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// unencryptedHTTP2 is net/http's TLSNextProto key for a cleartext HTTP/2
// connection whose preface the server has read (prior knowledge).
const unencryptedHTTP2 = "unencrypted_http2"

// keepaliveMinTime is the shortest interval between a client's pings that
// the native stream transport accepts: the client package pings every 10
// s while it has streams.
const keepaliveMinTime = 5 * time.Second

// Port serves the API on one listener: the JSON routes (HTTP/1.1, and
// HTTP/2 over TLS) through an http.Server, and the producer stream on
// gRPC's own HTTP/2 transport (grpc.Server.Serve) for the connections that
// are gRPC (see the package documentation, "Connections"). Build it with
// Server.NewPort; Serve once, then Shutdown or Close.
type Port struct {
	s     *Server
	http  *http.Server
	grpc  *grpc.Server
	queue *connQueue
	log   hclog.Logger
	tls   bool
	// grpcDone is closed when grpc.Server.Serve returned.
	grpcDone chan struct{}
}

// NewPort returns the API port of s within l: with tlsCfg, TLS (ALPN
// producerv1.ALPNProtocol for the native stream, then h2 and http/1.1),
// else cleartext (HTTP/1.1, and HTTP/2 with prior knowledge for the
// native stream). Serve it on a listener wrapped with LimitListenerPerIP,
// as HTTPServer.
func (s *Server) NewPort(l ServerLimits, tlsCfg *tls.Config) (*Port, error) {
	p := &Port{s: s, http: s.HTTPServer(l), queue: newConnQueue(), log: s.log.Named("port"), grpcDone: make(chan struct{})}
	if tlsCfg != nil {
		p.tls = true
		cfg := tlsCfg.Clone()
		cfg.NextProtos = append([]string{producerv1.ALPNProtocol},
			slices.DeleteFunc(slices.Clone(cfg.NextProtos), func(p string) bool { return p == producerv1.ALPNProtocol })...)
		p.http.TLSConfig = cfg
	}
	// net/http configures its own HTTP/2 server only when Serve starts,
	// and then takes the cleartext prior-knowledge connections for it;
	// configured here, the hand-off below replaces that one entry.
	if err := http2.ConfigureServer(p.http, &http2.Server{}); err != nil {
		return nil, fmt.Errorf("api: configuring HTTP/2: %w", err)
	}
	p.http.TLSNextProto[unencryptedHTTP2] = func(_ *http.Server, c *tls.Conn, _ http.Handler) {
		raw, ok := c.NetConn().(interface{ UnencryptedNetConn() net.Conn })
		if !ok {
			p.log.Error("cleartext HTTP/2 connection without its socket; closing it")
			c.Close()
			return
		}
		// net/http has read exactly the preface: gRPC reads it again.
		p.handoff(raw.UnencryptedNetConn(), []byte(http2Preface))
	}
	if tlsCfg != nil {
		p.http.TLSNextProto[producerv1.ALPNProtocol] = func(_ *http.Server, c *tls.Conn, _ http.Handler) {
			p.handoff(c, nil)
		}
	}
	opts := append(s.stream.serverOptions(),
		grpc.StreamInterceptor(p.intercept),
		grpc.MaxConcurrentStreams(MaxConcurrentStreams),
		grpc.InitialWindowSize(http2StreamWindow),
		grpc.InitialConnWindowSize(http2ConnWindow),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: l.IdleTimeout}),
	)
	if l.MaxHeaderBytes > 0 {
		opts = append(opts, grpc.MaxHeaderListSize(uint32(l.MaxHeaderBytes)))
	}
	if l.ReadHeaderTimeout > 0 {
		// Bounds reading the client's preface and settings.
		opts = append(opts, grpc.ConnectionTimeout(l.ReadHeaderTimeout))
	}
	p.grpc = grpc.NewServer(opts...)
	producerv1.RegisterProducerServer(p.grpc, s.stream)
	return p, nil
}

// HTTPServer is the port's http.Server (to read its settings; serve with
// Port.Serve).
func (p *Port) HTTPServer() *http.Server { return p.http }

// Serve serves on ln until Shutdown or Close (then it returns
// http.ErrServerClosed) or an error of ln.
func (p *Port) Serve(ln net.Listener) error {
	go func() {
		defer close(p.grpcDone)
		if err := p.grpc.Serve(p.queue); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			p.log.Error("native producer stream server ended", "error", err)
		}
	}()
	var err error
	if p.tls {
		err = p.http.ServeTLS(ln, "", "")
	} else {
		err = p.http.Serve(ln)
	}
	if !errors.Is(err, http.ErrServerClosed) {
		p.stopGRPC(false)
	}
	<-p.grpcDone
	return err
}

// Shutdown stops accepting connections and waits, until ctx is done, for
// the HTTP requests and the streams to end (call Server.Drain first: it
// ends the streams and long polls); see http.Server.Shutdown.
func (p *Port) Shutdown(ctx context.Context) error {
	stopped := make(chan struct{})
	go func() {
		p.stopGRPC(true)
		close(stopped)
	}()
	if err := p.http.Shutdown(ctx); err != nil {
		return err
	}
	select {
	case <-stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close closes the listener and every connection at once.
func (p *Port) Close() error {
	err := p.http.Close()
	p.stopGRPC(false)
	return err
}

// stopGRPC stops the native server (gracefully: GOAWAY, then waiting for
// the streams); a forced stop after a graceful one cuts it short.
func (p *Port) stopGRPC(graceful bool) {
	p.queue.Close()
	if graceful {
		p.grpc.GracefulStop()
		return
	}
	p.grpc.Stop()
}

// handoff serves c (after the TLS handshake, or cleartext after the
// preface, which replay holds) on the native gRPC server, and returns when
// the connection is closed: net/http closes it on return.
func (p *Port) handoff(c net.Conn, replay []byte) {
	// Busy for the connection limit for as long as gRPC holds it: gRPC's
	// own idle timeout (MaxConnectionIdle) closes it when it has no
	// stream.
	trackConnState(c, http.StateActive)
	gc := &grpcConn{Conn: c, replay: replay, closed: make(chan struct{}), since: time.Now()}
	gc.addr = &connAddr{Addr: c.RemoteAddr(), conn: gc}
	select {
	case p.queue.conns <- gc:
	case <-p.queue.done:
		c.Close()
		return
	}
	<-gc.closed
	if gc.streams.Load() == 0 {
		p.log.Debug("closed an API connection that opened no gRPC stream (not gRPC, a bad preface or settings, or silent for the connection timeout)",
			"remote", gc.addr.String(), "bytes_read", gc.read.Load(), "duration", time.Since(gc.since))
	}
}

// grpcConn is a connection handed to the native gRPC server.
type grpcConn struct {
	net.Conn
	replay  []byte
	addr    *connAddr
	since   time.Time
	read    atomic.Int64
	streams atomic.Int64
	once    sync.Once
	closed  chan struct{}
}

func (c *grpcConn) Read(b []byte) (int, error) {
	if len(c.replay) > 0 {
		n := copy(b, c.replay)
		c.replay = c.replay[n:]
		return n, nil
	}
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

func (c *grpcConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.closed) })
	return err
}

// RemoteAddr is the peer's address; gRPC gives it to the stream (peer),
// which finds the connection through it.
func (c *grpcConn) RemoteAddr() net.Addr { return c.addr }

// connAddr is a connection's remote address that leads back to it.
type connAddr struct {
	net.Addr
	conn *grpcConn
}

// connQueue is the listener of the native gRPC server: the connections
// handed off by the http.Server.
type connQueue struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newConnQueue() *connQueue {
	return &connQueue{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return queueAddr{} }

type queueAddr struct{}

func (queueAddr) Network() string { return "api" }
func (queueAddr) String() string  { return "api-port" }
