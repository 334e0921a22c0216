package memtransport

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/replicatorhq/replicator/transport"
)

// Defaults.
const (
	// DefaultBufferSize is how many bytes one direction of a connection
	// holds (written, not yet read) before Write blocks.
	DefaultBufferSize = 256 << 10
	// DefaultBacklog is how many dialed connections a listener holds before
	// Accept; further dials wait.
	DefaultBacklog = 128
	// firstEphemeralPort is the first port handed out for "host:0".
	firstEphemeralPort = 32768
)

// Errors. Connection errors are *net.OpError values wrapping these (or
// net.ErrClosed, os.ErrDeadlineExceeded, a context error).
var (
	// ErrReset: the connection was reset (a fault, Link.Reset, or the
	// listener closed before Accept). Also matches syscall.ECONNRESET.
	ErrReset error = errnoError{"memtransport: connection reset", syscall.ECONNRESET}
	// ErrBrokenPipe: Write after the peer closed. Also matches syscall.EPIPE.
	ErrBrokenPipe error = errnoError{"memtransport: broken pipe", syscall.EPIPE}
	// ErrRefused: nothing listens on the dialed address. Also matches
	// syscall.ECONNREFUSED.
	ErrRefused error = errnoError{"memtransport: connection refused", syscall.ECONNREFUSED}
	// ErrAddrInUse: Listen on an address already listened on. Also matches
	// syscall.EADDRINUSE.
	ErrAddrInUse error = errnoError{"memtransport: address already in use", syscall.EADDRINUSE}
)

type errnoError struct {
	msg   string
	errno syscall.Errno
}

func (e errnoError) Error() string        { return e.msg }
func (e errnoError) Is(target error) bool { return target == e.errno }

// Addr is a memtransport address. Network() is "mem".
type Addr string

func (a Addr) Network() string { return "mem" }
func (a Addr) String() string  { return string(a) }

// Config configures a Network. The zero value is valid.
type Config struct {
	// Seed makes every random fault decision reproducible. Each direction of
	// each connection draws from its own generator, derived from Seed, the
	// link and the connection's sequence number on it, so goroutine
	// scheduling does not change the decisions.
	Seed uint64
	// BufferSize bounds the bytes in flight per direction per connection
	// (0 = DefaultBufferSize). A Write blocks while it is full, also during a
	// partition.
	BufferSize int
	// Backlog bounds dialed, not yet accepted connections per listener
	// (0 = DefaultBacklog).
	Backlog int
	// Faults are the initial faults of every new link (Link.SetFaults
	// replaces them per link).
	Faults Faults
	// Observe, when set, is called for every connection event, with the
	// Network's lock held and in the order the events happen: it must not
	// block and must not call into the Network. Event.Data is valid only
	// during the call.
	Observe func(Event)
}

// EventKind says what an Event reports.
type EventKind int

const (
	EventConnect EventKind = iota // a Dial succeeded
	EventData                     // bytes accepted by a Write, before any fault is applied
	EventClose                    // one end closed
	EventReset                    // the connection was reset
)

func (k EventKind) String() string {
	switch k {
	case EventConnect:
		return "connect"
	case EventData:
		return "data"
	case EventClose:
		return "close"
	case EventReset:
		return "reset"
	}
	return "unknown"
}

// Event is one observed connection event.
type Event struct {
	Kind EventKind
	From string // the dialing Transport's name
	To   string // the listener address dialed
	Conn int    // the connection's sequence number on its link, from 1
	// ToListener is the direction of Data (and which end closed, for
	// EventClose): true from the dialer to the listener (slave->master).
	ToListener bool
	Data       []byte
}

// Faults are injected on every connection of a link, in both directions.
// The zero value injects nothing.
type Faults struct {
	// Delay holds every written byte back this long before the reader can
	// see it (time-based: fake time inside a synctest bubble).
	Delay time.Duration
	// Jitter adds a random extra delay in [0, Jitter) per write (or per
	// piece); delivery order is always kept.
	Jitter time.Duration
	// SplitWrites > 0 cuts each write into random pieces of 1..SplitWrites
	// bytes, and each Read returns at most one piece. 0 keeps writes whole,
	// and a Read then gathers every delivered byte it has room for, as TCP
	// coalesces segments.
	SplitWrites int
	// ResetAfterBytes > 0 resets each connection once that many bytes
	// (both directions together) have been written on it: the Write that
	// crosses the limit delivers the bytes up to it, then fails with
	// ErrReset.
	ResetAfterBytes int64
	// ResetProbability in [0, 1] resets the connection at the start of a
	// Write with this probability (drawn from the seeded generator).
	ResetProbability float64
}

// Network is a set of named in-memory listeners and the links between
// Transports and them. It starts no goroutine; everything blocks on one
// mutex and condition variable, and time comes from timers, so it works
// inside testing/synctest bubbles (create the Network inside the bubble). It
// is safe for concurrent use.
type Network struct {
	cfg       Config
	mu        sync.Mutex
	cond      *sync.Cond
	listeners map[string]*listener
	links     map[linkKey]*Link
	ports     int
}

type linkKey struct{ from, to string }

// NewNetwork returns an empty Network.
func NewNetwork(cfg Config) *Network {
	if cfg.BufferSize <= 0 {
		cfg.BufferSize = DefaultBufferSize
	}
	if cfg.Backlog <= 0 {
		cfg.Backlog = DefaultBacklog
	}
	n := &Network{cfg: cfg, listeners: map[string]*listener{}, links: map[linkKey]*Link{}, ports: firstEphemeralPort}
	n.cond = sync.NewCond(&n.mu)
	return n
}

func (n *Network) broadcast() {
	n.mu.Lock()
	n.cond.Broadcast()
	n.mu.Unlock()
}

func (n *Network) observe(ev Event) {
	if n.cfg.Observe != nil {
		n.cfg.Observe(ev)
	}
}

// Transport returns the endpoint of the node called name: its Dial calls
// travel on the links (name, address); its Listen registers addresses in the
// Network's single namespace.
func (n *Network) Transport(name string) *Transport { return &Transport{n: n, name: name} }

// Link returns the link from the node called from to the listener address
// to, creating it if needed. Its faults, partition and resets apply to all
// its connections, present and future.
func (n *Network) Link(from, to string) *Link {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.linkLocked(from, to)
}

func (n *Network) linkLocked(from, to string) *Link {
	k := linkKey{from, to}
	l := n.links[k]
	if l == nil {
		l = &Link{n: n, from: from, to: to, faults: n.cfg.Faults, conns: map[*connPair]struct{}{}}
		n.links[k] = l
	}
	return l
}

// Link is the path from one node to one listener address.
type Link struct {
	n           *Network
	from, to    string
	faults      Faults
	partitioned bool
	seq         int
	conns       map[*connPair]struct{}
}

// SetFaults replaces the link's faults. Bytes already written keep the
// delay they were given.
func (l *Link) SetFaults(f Faults) {
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	l.faults = f
	l.n.cond.Broadcast()
}

// Partition stalls the link: no byte (nor end of stream) is delivered in
// either direction until Heal, Writes block once their buffer is full, and
// new Dials wait (until Heal or their ctx ends). Deadlines still fire.
func (l *Link) Partition() {
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	l.partitioned = true
}

// Heal ends a partition; everything held back is delivered in order.
func (l *Link) Heal() {
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	l.partitioned = false
	l.n.cond.Broadcast()
}

// Reset resets every open connection of the link: both ends fail every
// later Read and Write with ErrReset and lose what was in flight. It
// returns how many connections it reset.
func (l *Link) Reset() int {
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	k := 0
	for p := range l.conns {
		if p.resetLocked() {
			k++
		}
	}
	return k
}

// Conns is the number of live connections on the link: not reset, and not
// closed at both ends.
func (l *Link) Conns() int {
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	return len(l.conns)
}

// Transport is one node's view of a Network. It implements
// transport.Transport.
type Transport struct {
	n    *Network
	name string
}

var _ transport.Transport = (*Transport)(nil)

// Name is the node name given to Network.Transport.
func (t *Transport) Name() string { return t.name }

// Listen registers addr (any non-empty string, conventionally "mem:master").
// An address ending in ":0" gets a free port instead, as TCP: Addr() tells
// which.
func (t *Transport) Listen(addr string) (net.Listener, error) {
	n := t.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if addr == "" {
		return nil, &net.OpError{Op: "listen", Net: "mem", Err: errors.New("memtransport: empty address")}
	}
	if host, ok := strings.CutSuffix(addr, ":0"); ok {
		for {
			n.ports++
			a := host + ":" + strconv.Itoa(n.ports)
			if n.listeners[a] == nil {
				addr = a
				break
			}
		}
	}
	if n.listeners[addr] != nil {
		return nil, &net.OpError{Op: "listen", Net: "mem", Addr: Addr(addr), Err: ErrAddrInUse}
	}
	l := &listener{n: n, addr: Addr(addr)}
	n.listeners[addr] = l
	return l, nil
}

// Dial connects to the listener at addr over the link (t's name, addr). It
// fails at once with ErrRefused if nothing listens there, and waits while
// the link is partitioned or the listener's backlog is full, until ctx ends
// (the error then wraps ctx.Err()). A dialed connection is established
// before Accept returns it, as with TCP.
func (t *Transport) Dial(ctx context.Context, addr string) (net.Conn, error) {
	n := t.n
	stop := context.AfterFunc(ctx, n.broadcast)
	defer stop()
	n.mu.Lock()
	defer n.mu.Unlock()
	lk := n.linkLocked(t.name, addr)
	for {
		if err := ctx.Err(); err != nil {
			return nil, &net.OpError{Op: "dial", Net: "mem", Addr: Addr(addr), Err: err}
		}
		l := n.listeners[addr]
		if l == nil {
			return nil, &net.OpError{Op: "dial", Net: "mem", Addr: Addr(addr), Err: ErrRefused}
		}
		if !lk.partitioned && len(l.backlog) < n.cfg.Backlog {
			lk.seq++
			p := newConnPair(lk, lk.seq, Addr(t.name+"#"+strconv.Itoa(lk.seq)), l.addr)
			l.backlog = append(l.backlog, p.server)
			n.cond.Broadcast()
			n.observe(Event{Kind: EventConnect, From: lk.from, To: lk.to, Conn: p.seq, ToListener: true})
			return p.client, nil
		}
		n.cond.Wait()
	}
}

type listener struct {
	n       *Network
	addr    Addr
	backlog []*conn
	closed  bool
}

// Accept returns the next dialed connection.
func (l *listener) Accept() (net.Conn, error) {
	n := l.n
	n.mu.Lock()
	defer n.mu.Unlock()
	for {
		if l.closed {
			return nil, &net.OpError{Op: "accept", Net: "mem", Addr: l.addr, Err: net.ErrClosed}
		}
		if len(l.backlog) > 0 {
			c := l.backlog[0]
			l.backlog[0] = nil
			l.backlog = l.backlog[1:]
			n.cond.Broadcast() // a Dial may wait for backlog room
			return c, nil
		}
		n.cond.Wait()
	}
}

// Close unregisters the address, fails blocked Accepts with net.ErrClosed
// and resets connections dialed but not accepted. Accepted connections
// stay open.
func (l *listener) Close() error {
	n := l.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if l.closed {
		return &net.OpError{Op: "close", Net: "mem", Addr: l.addr, Err: net.ErrClosed}
	}
	l.closed = true
	if n.listeners[string(l.addr)] == l {
		delete(n.listeners, string(l.addr))
	}
	for _, c := range l.backlog {
		c.pair.resetLocked()
	}
	l.backlog = nil
	n.cond.Broadcast()
	return nil
}

func (l *listener) Addr() net.Addr { return l.addr }

// seg is bytes in flight, readable from ready on.
type seg struct {
	b     []byte
	ready time.Time
}

// pipe is one direction of a connection.
type pipe struct {
	segs      []seg
	buffered  int
	lastReady time.Time
	eof       bool // the writer closed: EOF after the data
	broken    bool // the reader closed: writes fail
	rng       *rand.Rand
	toLn      bool // direction: dialer -> listener
}

type connPair struct {
	link           *Link
	seq            int
	client, server *conn
	up, down       *pipe // up: client -> server
	written        int64 // both directions
	err            error // reset
}

func newConnPair(lk *Link, seq int, caddr, saddr Addr) *connPair {
	p := &connPair{link: lk, seq: seq}
	p.up = &pipe{rng: lk.n.rng(lk, seq, "up"), toLn: true}
	p.down = &pipe{rng: lk.n.rng(lk, seq, "down")}
	p.client = &conn{pair: p, rd: p.down, wr: p.up, local: caddr, remote: saddr}
	p.server = &conn{pair: p, rd: p.up, wr: p.down, local: saddr, remote: caddr}
	lk.conns[p] = struct{}{}
	return p
}

func (n *Network) rng(lk *Link, seq int, dir string) *rand.Rand {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00%s", lk.from, lk.to, seq, dir)
	return rand.New(rand.NewPCG(n.cfg.Seed, h.Sum64()))
}

// resetLocked resets the connection; false if it was already reset.
func (p *connPair) resetLocked() bool {
	if p.err != nil {
		return false
	}
	p.err = ErrReset
	for _, pp := range []*pipe{p.up, p.down} {
		pp.segs, pp.buffered = nil, 0
	}
	delete(p.link.conns, p)
	n := p.link.n
	n.cond.Broadcast()
	n.observe(Event{Kind: EventReset, From: p.link.from, To: p.link.to, Conn: p.seq})
	return true
}

type deadline struct {
	t     time.Time
	timer *time.Timer
}

func (d *deadline) set(n *Network, t time.Time) {
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	d.t = t
	if !t.IsZero() {
		if wait := time.Until(t); wait > 0 {
			d.timer = time.AfterFunc(wait, n.broadcast)
		}
	}
	n.cond.Broadcast()
}

func (d *deadline) passed() bool { return !d.t.IsZero() && !time.Now().Before(d.t) }

// conn is one end of a connection.
type conn struct {
	pair          *connPair
	rd, wr        *pipe
	local, remote Addr
	closed        bool
	rdl, wdl      deadline
}

func (c *conn) opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: "mem", Source: c.local, Addr: c.remote, Err: err}
}

// Read reads delivered bytes: with SplitWrites at most one piece, otherwise
// everything delivered that fits. io.EOF after the peer closed and all its
// bytes were read.
func (c *conn) Read(b []byte) (int, error) {
	n := c.pair.link.n
	n.mu.Lock()
	defer n.mu.Unlock()
	var wake *time.Timer
	defer func() {
		if wake != nil {
			wake.Stop()
		}
	}()
	for {
		switch {
		case c.closed:
			return 0, c.opErr("read", net.ErrClosed)
		case c.pair.err != nil:
			return 0, c.opErr("read", c.pair.err)
		case c.rdl.passed():
			return 0, c.opErr("read", os.ErrDeadlineExceeded)
		}
		if len(b) == 0 {
			return 0, nil
		}
		pp := c.rd
		if !c.pair.link.partitioned {
			now := time.Now()
			if len(pp.segs) > 0 && !pp.segs[0].ready.After(now) {
				split := c.pair.link.faults.SplitWrites > 0
				k := 0
				for k < len(b) && len(pp.segs) > 0 && !pp.segs[0].ready.After(now) {
					s := &pp.segs[0]
					m := copy(b[k:], s.b)
					k += m
					s.b = s.b[m:]
					if len(s.b) == 0 {
						pp.segs[0] = seg{}
						pp.segs = pp.segs[1:]
					}
					if split {
						break
					}
				}
				pp.buffered -= k
				n.cond.Broadcast() // writers wait for room
				return k, nil
			}
			if len(pp.segs) == 0 && pp.eof {
				return 0, io.EOF
			}
			if len(pp.segs) > 0 && wake == nil {
				wake = time.AfterFunc(pp.segs[0].ready.Sub(now), n.broadcast)
			}
		}
		n.cond.Wait()
		if wake != nil {
			wake.Stop()
			wake = nil
		}
	}
}

// Write queues b for the peer, blocking while the direction's buffer is
// full. Faults of the link apply.
func (c *conn) Write(b []byte) (int, error) {
	n := c.pair.link.n
	n.mu.Lock()
	defer n.mu.Unlock()
	p, pp, lk := c.pair, c.wr, c.pair.link
	if f := lk.faults; f.ResetProbability > 0 && !c.closed && p.err == nil && pp.rng.Float64() < f.ResetProbability {
		p.resetLocked()
	}
	written := 0
	for {
		switch {
		case c.closed:
			return written, c.opErr("write", net.ErrClosed)
		case p.err != nil:
			return written, c.opErr("write", p.err)
		case pp.broken:
			return written, c.opErr("write", ErrBrokenPipe)
		case c.wdl.passed():
			return written, c.opErr("write", os.ErrDeadlineExceeded)
		}
		if len(b) == 0 {
			return written, nil
		}
		room := n.cfg.BufferSize - pp.buffered
		if room <= 0 {
			n.cond.Wait()
			continue
		}
		f := lk.faults
		k := min(room, len(b))
		reset := false
		if f.ResetAfterBytes > 0 && p.written+int64(k) >= f.ResetAfterBytes {
			k = int(max(f.ResetAfterBytes-p.written, 0))
			reset = true
		}
		n.observe(Event{Kind: EventData, From: lk.from, To: lk.to, Conn: p.seq, ToListener: pp.toLn, Data: b[:k]})
		c.enqueue(b[:k], f)
		p.written += int64(k)
		written += k
		b = b[k:]
		n.cond.Broadcast()
		if reset {
			p.resetLocked()
		}
	}
}

func (c *conn) enqueue(b []byte, f Faults) {
	if len(b) == 0 {
		return
	}
	pp := c.wr
	data := append([]byte(nil), b...)
	now := time.Now()
	for len(data) > 0 {
		k := len(data)
		if f.SplitWrites > 0 {
			k = min(k, 1+pp.rng.IntN(f.SplitWrites))
		}
		ready := now.Add(f.Delay)
		if f.Jitter > 0 {
			ready = ready.Add(time.Duration(pp.rng.Int64N(int64(f.Jitter))))
		}
		if ready.Before(pp.lastReady) {
			ready = pp.lastReady
		}
		pp.lastReady = ready
		pp.segs = append(pp.segs, seg{b: data[:k:k], ready: ready})
		pp.buffered += k
		data = data[k:]
	}
}

// Close closes this end: the peer reads io.EOF after the bytes already
// written (FIN), and its Writes fail with ErrBrokenPipe. Bytes this end had
// not read are dropped. A second Close returns net.ErrClosed.
func (c *conn) Close() error {
	n := c.pair.link.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if c.closed {
		return c.opErr("close", net.ErrClosed)
	}
	c.closed = true
	c.rdl.set(n, time.Time{})
	c.wdl.set(n, time.Time{})
	c.wr.eof = true
	c.rd.broken = true
	c.rd.segs, c.rd.buffered = nil, 0
	p := c.pair
	if p.client.closed && p.server.closed {
		delete(p.link.conns, p)
	}
	n.cond.Broadcast()
	n.observe(Event{Kind: EventClose, From: p.link.from, To: p.link.to, Conn: p.seq, ToListener: c == p.client})
	return nil
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }

func (c *conn) SetDeadline(t time.Time) error      { return c.setDeadlines(t, &c.rdl, &c.wdl) }
func (c *conn) SetReadDeadline(t time.Time) error  { return c.setDeadlines(t, &c.rdl) }
func (c *conn) SetWriteDeadline(t time.Time) error { return c.setDeadlines(t, &c.wdl) }

// setDeadlines sets each of ds to t, under the network's lock.
func (c *conn) setDeadlines(t time.Time, ds ...*deadline) error {
	n := c.pair.link.n
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, d := range ds {
		d.set(n, t)
	}
	return nil
}
