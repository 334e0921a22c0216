package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
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
