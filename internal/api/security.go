package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// openRoutes answer without a token: probes must work without secrets.
var openRoutes = map[string]bool{"healthz": true, "readyz": true}

// authenticate wraps h with the bearer-token check.
func (s *Server) authenticate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		scheme, tok, ok := strings.Cut(auth, " ")
		if auth == "" || !ok || !strings.EqualFold(scheme, "Bearer") {
			s.authFail.WithLabelValues("missing").Inc()
			s.unauthorized(w, r, "missing")
			return
		}
		// Hash both sides so the comparison takes the same time whatever
		// the lengths.
		got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
		if subtle.ConstantTimeCompare(got[:], s.token[:]) != 1 {
			s.authFail.WithLabelValues("invalid").Inc()
			s.unauthorized(w, r, "invalid")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request, reason string) {
	s.log.Debug("unauthorized request", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "reason", reason)
	w.Header().Set("WWW-Authenticate", `Bearer realm="replicator"`)
	msg := "missing bearer token: send Authorization: Bearer <token>"
	if reason == "invalid" {
		msg = "invalid bearer token"
	}
	WriteError(w, http.StatusUnauthorized, msg)
}

// MaxPathBytes bounds a request path; a longer one answers 414.
const MaxPathBytes = 4096

// checkPath refuses, before routing, paths that net/http would otherwise
// redirect or that no route can mean: not clean ("..", ".", "//" segments,
// also when %-encoded), not UTF-8, control characters (NUL...). It returns
// the message of a 400 answer, or "".
func checkPath(r *http.Request) string {
	p := r.URL.Path
	switch {
	case len(r.URL.RawPath) > MaxPathBytes || len(p) > MaxPathBytes:
		return "path longer than 4096 bytes"
	case r.Method == http.MethodConnect:
		return "CONNECT is not served"
	case !strings.HasPrefix(p, "/"):
		return "path must start with /"
	case !utf8.ValidString(p):
		return "path is not valid UTF-8"
	case strings.ContainsFunc(p, func(c rune) bool { return c < 0x20 || c == 0x7f }):
		return "path holds control characters"
	case strings.Contains(p, "\\"):
		return "path holds a backslash"
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	if clean != p {
		return "path is not clean (no '.', '..' or empty segments): " + p
	}
	return ""
}

// Server limits: defaults of ServerLimits.
const (
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = time.Minute // a put body of MaxBodyBytes over a slow link
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxHeaderBytes    = 64 << 10 // properties are at most 32 KiB encoded
	DefaultMaxConns          = 1024
)

// ServerLimits bound what one client can hold of an http.Server: time to
// send its headers (slowloris), time to send its body, idle keep-alive time,
// header bytes and open connections.
type ServerLimits struct {
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	// WriteTimeout must cover the longest answer: long polls (MaxWait) and
	// sync puts (the slave timeout).
	WriteTimeout   time.Duration
	IdleTimeout    time.Duration
	MaxHeaderBytes int
	// MaxConns bounds the connections open at once (see LimitListener).
	MaxConns int
}

// DefaultServerLimits returns the limits of a node's API server for a
// slave timeout of slaveTimeout.
func DefaultServerLimits(slaveTimeout time.Duration) ServerLimits {
	return ServerLimits{
		ReadHeaderTimeout: DefaultReadHeaderTimeout,
		ReadTimeout:       DefaultReadTimeout,
		WriteTimeout:      MaxWait + slaveTimeout + 30*time.Second,
		IdleTimeout:       DefaultIdleTimeout,
		MaxHeaderBytes:    DefaultMaxHeaderBytes,
		MaxConns:          DefaultMaxConns,
	}
}

// HTTPServer returns an http.Server that serves s within l, logging its
// errors (TLS handshake failures, ...) to the server's logger. Serve it on a
// listener wrapped with LimitListener(ln, l.MaxConns, ...).
func (s *Server) HTTPServer(l ServerLimits) *http.Server {
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ErrorLog:          s.log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
}

// LimitListener returns a listener that keeps at most n accepted
// connections open at once: a connection over the limit is closed at
// accept (not queued, so a flood cannot hold the accept loop) with a debug
// line and a count in replicator_http_refused_connections_total when reg is
// set. n <= 0 means no limit.
func LimitListener(ln net.Listener, n int, logger hclog.Logger, reg prometheus.Registerer) (net.Listener, error) {
	if n <= 0 {
		return ln, nil
	}
	refused := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "replicator_http_refused_connections_total",
		Help: "API connections closed at accept because the connection limit was reached.",
	})
	if reg != nil {
		if err := reg.Register(refused); err != nil {
			return nil, err
		}
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &limitListener{Listener: ln, max: n, log: logger, refused: refused}, nil
}

type limitListener struct {
	net.Listener
	max     int
	log     hclog.Logger
	refused prometheus.Counter
	mu      sync.Mutex
	open    int
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		full := l.open >= l.max
		if !full {
			l.open++
		}
		l.mu.Unlock()
		if full {
			l.refused.Inc()
			l.log.Debug("refusing API connection: connection limit reached", "remote", c.RemoteAddr().String(), "limit", l.max)
			c.Close()
			continue
		}
		return &limitedConn{Conn: c, l: l}, nil
	}
}

type limitedConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

// CloseWrite half-closes the connection when the underlying one can
// (*net.TCPConn): http.Server uses it to send an error answer (431, 400)
// without resetting a client that is still writing.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("api: connection cannot half-close")
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		c.l.mu.Unlock()
	})
	return err
}
