package api

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/internal/promreg"
)

// DefaultMaxConnsPerIP bounds the API connections from one IP address: a
// quarter of DefaultMaxConns, so that one client (or one address behind a
// NAT) cannot hold them all.
const DefaultMaxConnsPerIP = 256

// LimitListener returns a listener that keeps at most n accepted
// connections open at once (n <= 0: no limit); see LimitListenerPerIP.
func LimitListener(ln net.Listener, n int, logger hclog.Logger, reg prometheus.Registerer) (net.Listener, error) {
	return LimitListenerPerIP(ln, n, 0, logger, reg)
}

// LimitListenerPerIP returns a listener that keeps at most n accepted
// connections open at once, and at most perIP from one IP address (either
// <= 0: no such limit). Its connections also turn net/http's own
// plain-text error answers into JSON (see jsonErrorAnswer).
//
// When a new connection finds a limit reached, the listener first closes
// the connection of that scope (the same address for perIP, any address
// for n) that has been idle the longest: a keep-alive connection waiting
// for its next request (http.StateIdle), or else one that has sent nothing
// since it was accepted for more than newGrace. Only when none is
// closable is the new connection closed at accept (not queued, so a flood
// cannot hold the accept loop). Idle state comes from the http.Server's
// ConnState hook, which HTTPServer installs; without it (another server)
// the listener only refuses. Each refusal is a debug line and a count in
// replicator_http_refused_connections_total{reason="total"|"per_ip"}, each
// eviction a count in replicator_http_evicted_connections_total, when reg
// is set.
func LimitListenerPerIP(ln net.Listener, n, perIP int, logger hclog.Logger, reg prometheus.Registerer) (net.Listener, error) {
	l := &limitListener{
		Listener: ln, max: n, perIP: perIP, now: time.Now,
		conns: map[*limitedConn]struct{}{}, byIP: map[netip.Addr]int{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "replicator_http_refused_connections_total",
			Help: "API connections closed at accept because a connection limit was reached with no idle connection to close instead, by limit: total (--api-max-conns) or per_ip (--api-max-conns-per-ip).",
		}, []string{"reason"}),
		evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "replicator_http_evicted_connections_total",
			Help: "Idle API connections closed to make room for a new one when a connection limit was reached.",
		}),
	}
	if err := errors.Join(promreg.Into(reg, &l.refused), promreg.Into(reg, &l.evicted)); err != nil {
		return nil, fmt.Errorf("api: registering listener metrics: %w", err)
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	l.log = logger
	return l, nil
}

// newGrace is how long a connection may stay without a first request
// before a new connection may close it: a real client sends its request
// at once.
const newGrace = time.Second

type limitListener struct {
	net.Listener
	max, perIP int
	log        hclog.Logger
	refused    *prometheus.CounterVec
	evicted    prometheus.Counter
	now        func() time.Time

	mu    sync.Mutex
	conns map[*limitedConn]struct{}
	byIP  map[netip.Addr]int
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		var ip netip.Addr
		if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
			ip = ap.Addr().Unmap()
		}
		lc, victims, reason := l.admit(c, ip)
		for _, v := range victims {
			l.evicted.Inc()
			l.log.Debug("closing an idle API connection to make room", "remote", v.RemoteAddr().String(), "for", c.RemoteAddr().String())
			v.Conn.Close()
		}
		if lc == nil {
			l.refused.WithLabelValues(reason).Inc()
			l.log.Debug("refusing API connection: connection limit reached and no idle connection to close", "remote", c.RemoteAddr().String(),
				"limit", reason, "max_conns", l.max, "max_conns_per_ip", l.perIP)
			c.Close()
			continue
		}
		return lc, nil
	}
}

// admit accounts a new connection, choosing the idle connections to close
// to make room; it returns a nil conn and the limit's name when there is
// no room.
func (l *limitListener) admit(c net.Conn, ip netip.Addr) (*limitedConn, []*limitedConn, string) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var victims []*limitedConn
	if l.perIP > 0 && l.byIP[ip] >= l.perIP {
		v := l.idlestLocked(now, func(o *limitedConn) bool { return o.ip == ip })
		if v == nil {
			return nil, nil, "per_ip"
		}
		l.releaseLocked(v)
		victims = append(victims, v)
	}
	if l.max > 0 && len(l.conns) >= l.max {
		v := l.idlestLocked(now, nil)
		if v == nil {
			// Undo nothing: a victim chosen for the per-IP limit is
			// closed anyway and frees its place.
			return nil, victims, "total"
		}
		l.releaseLocked(v)
		victims = append(victims, v)
	}
	lc := &limitedConn{Conn: c, l: l, ip: ip, since: now, state: http.StateNew}
	l.conns[lc] = struct{}{}
	l.byIP[ip]++
	return lc, victims, ""
}

// idlestLocked returns the closable connection (matching keep, when not
// nil) idle the longest, or nil.
func (l *limitListener) idlestLocked(now time.Time, keep func(*limitedConn) bool) *limitedConn {
	var best *limitedConn
	for c := range l.conns {
		if keep != nil && !keep(c) {
			continue
		}
		closable := c.state == http.StateIdle || (c.state == http.StateNew && now.Sub(c.since) > newGrace)
		if closable && (best == nil || c.since.Before(best.since)) {
			best = c
		}
	}
	return best
}

// releaseLocked removes c from the accounting (once).
func (l *limitListener) releaseLocked(c *limitedConn) {
	if c.released {
		return
	}
	c.released = true
	delete(l.conns, c)
	if l.byIP[c.ip]--; l.byIP[c.ip] <= 0 {
		delete(l.byIP, c.ip)
	}
}

// setState records an http.Server connection state change.
func (l *limitListener) setState(c *limitedConn, s http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s == http.StateIdle || c.state != s {
		c.since = l.now()
	}
	c.state = s
}

type limitedConn struct {
	net.Conn
	l  *limitListener
	ip netip.Addr
	// Guarded by l.mu.
	state    http.ConnState
	since    time.Time // accepted, or entered its current state
	released bool
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

// Write sends b, replacing an error answer that net/http writes by itself
// (not through a handler) with its JSON form.
func (c *limitedConn) Write(b []byte) (int, error) {
	if j, ok := jsonErrorAnswer(b); ok {
		if _, err := c.Conn.Write(j); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// netHTTPErrorHeaders are the headers of the answers net/http's server
// writes by itself, in one write, before any handler runs: 431 (headers or
// request line over MaxHeaderBytes), 400 (a malformed request), 501 (an
// unknown transfer encoding). Handlers' answers never look like this: they
// go through WriteJSON, which sets a Content-Length.
const netHTTPErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// jsonErrorAnswer rewrites one of net/http's own plain-text error answers
// (HTTP/1.1 4xx or 5xx, netHTTPErrorHeaders, the text) as the same status
// with {"error": text}, so that every answer of the API is JSON.
func jsonErrorAnswer(b []byte) ([]byte, bool) {
	if len(b) > 4096 || len(b) < len("HTTP/1.1 400 ") || !bytes.HasPrefix(b, []byte("HTTP/1.1 ")) || (b[9] != '4' && b[9] != '5') ||
		b[10] < '0' || b[10] > '9' || b[11] < '0' || b[11] > '9' || b[12] != ' ' {
		return nil, false
	}
	i := bytes.Index(b, []byte(netHTTPErrorHeaders))
	if i < 0 || bytes.Contains(b[:i], []byte("\r\n")) {
		return nil, false
	}
	body, _ := json.Marshal(ErrorAnswer{Error: string(b[i+len(netHTTPErrorHeaders):])})
	body = append(body, '\n')
	out := make([]byte, 0, i+len(body)+128)
	out = append(out, b[:i]...)
	out = append(out, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	out = strconv.AppendInt(out, int64(len(body)), 10)
	out = append(out, "\r\nConnection: close\r\n\r\n"...)
	return append(out, body...), true
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.l.mu.Lock()
	c.l.releaseLocked(c)
	c.l.mu.Unlock()
	return err
}

// trackConnState is the http.Server ConnState hook of HTTPServer: it tells
// a LimitListenerPerIP which connections are idle.
func trackConnState(c net.Conn, s http.ConnState) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if lc, ok := c.(*limitedConn); ok {
		lc.l.setState(lc, s)
	}
}
