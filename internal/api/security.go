package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// openRoutes answer without a token: probes must work without secrets.
var openRoutes = map[string]bool{"healthz": true, "readyz": true}

// authenticate wraps h with the bearer-token check.
func (s *Server) authenticate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if reason := s.checkToken(r.Header.Get("Authorization")); reason != "" {
			s.authFail.WithLabelValues(reason).Inc()
			s.unauthorized(w, r, reason)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// checkToken checks an Authorization value against Config.Token: "" when
// it carries the token, else the reason of the refusal (the label of
// replicator_http_auth_failures_total): missing or invalid.
func (s *Server) checkToken(auth string) string {
	scheme, tok, ok := strings.Cut(auth, " ")
	if auth == "" || !ok || !strings.EqualFold(scheme, "Bearer") {
		return "missing"
	}
	// Hash both sides so the comparison takes the same time whatever the
	// lengths.
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	if subtle.ConstantTimeCompare(got[:], s.token[:]) != 1 {
		return "invalid"
	}
	return ""
}

// unauthorizedText is the message of a refused token.
func unauthorizedText(reason string) string {
	if reason == "invalid" {
		return "invalid bearer token"
	}
	return "missing bearer token: send Authorization: Bearer <token>"
}

func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request, reason string) {
	s.log.Debug("unauthorized request", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "reason", reason)
	w.Header().Set("WWW-Authenticate", `Bearer realm="replicator"`)
	WriteError(w, http.StatusUnauthorized, unauthorizedText(reason))
}

// intercept is the native stream's (Port) part of what instrument and
// ServeHTTP give the JSON routes and the stream served through the
// http.Server: the token check (the same reasons, metric and log line; the
// gRPC status Unauthenticated, which a 401 also maps to), the request
// metrics of route "stream" (code 200, or 401) and the debug request line.
func (p *Port) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	s := p.s
	start := s.cfg.Now()
	ctx := ss.Context()
	remote := ""
	if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
		remote = pr.Addr.String()
		if ca, ok := pr.Addr.(*connAddr); ok {
			ca.conn.streams.Add(1)
		}
	}
	code := http.StatusOK
	var err error
	reason := ""
	if s.cfg.Token != "" {
		auth := ""
		if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) > 0 {
			auth = v[0]
		}
		reason = s.checkToken(auth)
	}
	if reason != "" {
		s.authFail.WithLabelValues(reason).Inc()
		s.log.Debug("unauthorized request", "method", http.MethodPost, "path", info.FullMethod, "remote", remote, "reason", reason)
		code = http.StatusUnauthorized
		// The HTTP status in the message too: what a gRPC client says of
		// the http.Server's 401 on the other path.
		err = status.Error(codes.Unauthenticated, "401 Unauthorized: "+unauthorizedText(reason))
	} else {
		err = handler(srv, ss)
	}
	d := s.cfg.Now().Sub(start)
	s.reqs.WithLabelValues("stream", strconv.Itoa(code)).Inc()
	s.dur.WithLabelValues("stream").Observe(d.Seconds())
	if s.log.IsDebug() {
		s.log.Debug("request", "method", http.MethodPost, "path", info.FullMethod, "code", code, "remote", remote, "duration", d, "transport", "grpc")
	}
	return err
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
	// MaxConns bounds the connections open at once, MaxConnsPerIP those
	// from one IP address (see LimitListenerPerIP).
	MaxConns      int
	MaxConnsPerIP int
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
		MaxConnsPerIP:     DefaultMaxConnsPerIP,
	}
}

// HTTPServer returns an http.Server that serves s within l, logging its
// errors (TLS handshake failures, ...) to the server's logger. Serve it on a
// listener wrapped with LimitListenerPerIP(ln, l.MaxConns, l.MaxConnsPerIP,
// ...): its ConnState hook tells that listener which connections are idle.
// Alone it serves the producer stream through grpc.Server.ServeHTTP only;
// a node serves through NewPort, which adds gRPC's own transport.
func (s *Server) HTTPServer(l ServerLimits) *http.Server {
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ErrorLog:          s.log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
		ConnState:         trackConnState,
		// HTTP/2 (also cleartext, with prior knowledge) carries the
		// producer stream (stream.go).
		Protocols: streamProtocols(),
		HTTP2:     streamHTTP2Config(),
	}
}
