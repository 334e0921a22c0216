package transportplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/replicatorhq/replicator/sdk/internal/side"
	"github.com/replicatorhq/replicator/sdk/proto/transportv1"
	"github.com/replicatorhq/replicator/transport"
)

// ClientConfig tunes the host side of a transport plugin. Zero values take
// the defaults.
type ClientConfig struct {
	// CallTimeout bounds each control-plane call other than Dial, whose
	// bound is the caller's ctx (default 30s).
	CallTimeout time.Duration
	// AcceptQueue is how many accepted connections a listener holds for
	// Accept; beyond that new ones are closed with a warning (default 128).
	AcceptQueue int
	// Logger receives the client's own logs; nil = none.
	Logger hclog.Logger
}

func (c *ClientConfig) defaults() {
	if c.CallTimeout <= 0 {
		c.CallTimeout = 30 * time.Second
	}
	if c.AcceptQueue <= 0 {
		c.AcceptQueue = 128
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
}

// Client is an external transport plugin seen as a transport.Transport.
// Listen and Dial are control-plane calls; the connections they produce are
// the host's own kernel sockets (*net.TCPConn for a TCP plugin), received
// as descriptors, so every byte is read and written by the host.
type Client struct {
	rpc transportv1.TransportClient
	cfg ClientConfig
	log hclog.Logger
	rx  *fdReceiver

	dead   chan struct{} // closed when the descriptor channel ends
	readWG sync.WaitGroup

	mu      sync.Mutex
	dials   map[uint64]chan net.Conn
	lns     map[uint64]*listener
	nextID  uint64 // dial and listener ids
	closed  bool
	deadErr error
}

var _ transport.Transport = (*Client)(nil)

// Open opens the plugin's transport: it offers the plugin a descriptor
// channel (a unix socket in a private directory, plus a token, sent on the
// gRPC control plane) and waits for the plugin to connect to it.
func (c *Conn) Open(ctx context.Context, req OpenRequest, cfg ClientConfig) (*Client, error) {
	cfg.defaults()
	if !fdSupported {
		return nil, fmt.Errorf("transportplugin: open: %w", errNoFDSystem)
	}
	sl, err := side.Listen()
	if err != nil {
		return nil, fmt.Errorf("transportplugin: open: %w", err)
	}
	uc, rerr, aerr := sl.AcceptDuring(ctx, func(ctx context.Context) error {
		_, err := c.rpc.Open(ctx, &transportv1.OpenRequest{Options: req.Options, FdSocket: sl.Path, Token: sl.Token})
		return err
	})
	if rerr != nil {
		return nil, fmt.Errorf("transportplugin: open: %w", fromStatus(rerr))
	}
	if aerr != nil {
		return nil, fmt.Errorf("transportplugin: open: %w", aerr)
	}
	cl := &Client{
		rpc:   c.rpc,
		cfg:   cfg,
		log:   cfg.Logger,
		rx:    newFDReceiver(uc),
		dead:  make(chan struct{}),
		dials: map[uint64]chan net.Conn{},
		lns:   map[uint64]*listener{},
	}
	cl.readWG.Add(1)
	go cl.readLoop()
	return cl, nil
}

// readLoop receives the handed-over connections and routes each to its Dial
// or listener. It ends when the plugin closes the channel (Close, or the
// process is gone).
func (c *Client) readLoop() {
	defer c.readWG.Done()
	for {
		typ, id, conn, err := c.rx.next()
		if err != nil {
			c.mu.Lock()
			closed := c.closed
			c.deadErr = fmt.Errorf("transportplugin: descriptor channel ended (%v): %w", err, ErrPluginShutdown)
			lns := make([]*listener, 0, len(c.lns))
			for _, l := range c.lns {
				lns = append(lns, l)
			}
			c.mu.Unlock()
			if !closed {
				c.log.Error("transport plugin is gone", "error", err)
			}
			close(c.dead)
			for _, l := range lns {
				l.end(c.deadErr)
			}
			return
		}
		c.route(typ, id, conn)
	}
}

func (c *Client) route(typ byte, id uint64, conn net.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch typ {
	case recDialed:
		if w := c.dials[id]; w != nil && conn != nil {
			w <- conn // buffered 1; one record per dial id
			delete(c.dials, id)
			return
		}
	case recAccepted:
		if l := c.lns[id]; l != nil && conn != nil {
			l.deliver(conn)
			return
		}
	case recEnded:
		if l := c.lns[id]; l != nil {
			go l.end(fmt.Errorf("transportplugin: the plugin's listener on %s stopped", l.Addr()))
		}
	default:
		c.log.Warn("unknown record on the descriptor channel", "type", typ)
	}
	if conn != nil {
		conn.Close() // nobody waits for it (a Dial gave up)
	}
}

func (c *Client) check() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checkLocked()
}

// Listen asks the plugin to listen on addr; its accepted connections come
// out of the returned listener's Accept as the host's own sockets.
func (c *Client) Listen(addr string) (net.Listener, error) {
	c.mu.Lock()
	if err := c.checkLocked(); err != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("transportplugin: listen %s: %w", addr, err)
	}
	c.nextID++
	l := &listener{
		c:     c,
		id:    c.nextID,
		queue: make(chan net.Conn, c.cfg.AcceptQueue),
		ended: make(chan struct{}),
		done:  make(chan struct{}),
	}
	// Registered before the call: the plugin may hand over a connection
	// before its answer arrives.
	c.lns[l.id] = l
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CallTimeout)
	defer cancel()
	r, err := c.rpc.Listen(ctx, &transportv1.ListenRequest{Id: l.id, Addr: addr})
	if err != nil {
		c.mu.Lock()
		delete(c.lns, l.id)
		c.mu.Unlock()
		l.drain()
		return nil, fmt.Errorf("transportplugin: listen %s: %w", addr, fromStatus(err))
	}
	l.mu.Lock()
	l.addr = pluginAddr(r.Network, r.Addr)
	l.mu.Unlock()
	return l, nil
}

// Dial asks the plugin to connect to addr and returns the connection it
// hands over. ctx bounds the whole call (the plugin's connect included).
func (c *Client) Dial(ctx context.Context, addr string) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("transportplugin: dial %s: %w", addr, err)
	}
	c.mu.Lock()
	if err := c.checkLocked(); err != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("transportplugin: dial %s: %w", addr, err)
	}
	c.nextID++
	id := c.nextID
	w := make(chan net.Conn, 1)
	c.dials[id] = w
	c.mu.Unlock()
	giveUp := func() {
		c.mu.Lock()
		delete(c.dials, id)
		c.mu.Unlock()
		select {
		case conn := <-w: // arrived meanwhile
			conn.Close()
		default:
		}
	}
	if _, err := c.rpc.Dial(ctx, &transportv1.DialRequest{Id: id, Addr: addr}); err != nil {
		giveUp()
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("transportplugin: dial %s: %w", addr, cerr)
		}
		return nil, fmt.Errorf("transportplugin: dial %s: %w", addr, fromStatus(err))
	}
	select {
	case conn := <-w:
		return conn, nil
	case <-c.dead:
		giveUp()
		return nil, fmt.Errorf("transportplugin: dial %s: %w", addr, ErrPluginShutdown)
	case <-ctx.Done():
		giveUp()
		return nil, fmt.Errorf("transportplugin: dial %s: %w", addr, ctx.Err())
	}
}

func (c *Client) checkLocked() error {
	if c.closed {
		return ErrClosed
	}
	return c.deadErr
}

// Close closes the plugin's listeners and the descriptor channel.
// Connections already handed over stay open (they are the host's).
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.closed = true
	lns := c.lns
	c.lns = map[uint64]*listener{}
	dead := c.deadErr != nil
	c.mu.Unlock()
	for _, l := range lns {
		l.end(net.ErrClosed)
	}
	var err error
	if !dead {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CallTimeout)
		if _, rerr := c.rpc.Close(ctx, &transportv1.CloseRequest{}); rerr != nil {
			err = fmt.Errorf("transportplugin: close: %w", fromStatus(rerr))
		}
		cancel()
	}
	c.rx.c.Close()
	c.readWG.Wait()
	return err
}

// listener is the host's view of a plugin listener.
type listener struct {
	c     *Client
	id    uint64
	addr  net.Addr
	queue chan net.Conn

	mu       sync.Mutex
	endErr   error
	ended    chan struct{} // closed by end: the plugin's listener is gone
	done     chan struct{} // closed by Close
	closeOne sync.Once
}

// deliver queues an accepted connection (called with c.mu held).
func (l *listener) deliver(conn net.Conn) {
	select {
	case <-l.done:
		conn.Close()
		return
	default:
	}
	select {
	case l.queue <- conn:
	default:
		l.c.log.Warn("accept queue full; closing a new connection", "listener", l.Addr().String(), "remote", conn.RemoteAddr().String())
		conn.Close()
	}
}

// end marks the plugin's listener gone; Accept fails with err once the
// queue is empty.
func (l *listener) end(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.endErr != nil {
		return
	}
	l.endErr = err
	close(l.ended)
}

// Accept returns the next connection the plugin accepted and handed over.
func (l *listener) Accept() (net.Conn, error) {
	select {
	case <-l.done:
		return nil, l.opErr(net.ErrClosed)
	default:
	}
	select {
	case conn := <-l.queue:
		return conn, nil
	case <-l.done:
		return nil, l.opErr(net.ErrClosed)
	case <-l.ended:
		select {
		case conn := <-l.queue:
			return conn, nil
		default:
		}
		l.mu.Lock()
		err := l.endErr
		l.mu.Unlock()
		return nil, l.opErr(err)
	}
}

func (l *listener) opErr(err error) error {
	a := l.Addr()
	return &net.OpError{Op: "accept", Net: a.Network(), Addr: a, Err: err}
}

// Close stops the plugin's listener and fails a blocked Accept with
// net.ErrClosed; connections already accepted stay open.
func (l *listener) Close() error {
	var err error
	l.closeOne.Do(func() {
		l.c.mu.Lock()
		delete(l.c.lns, l.id)
		l.c.mu.Unlock()
		close(l.done)
		l.end(net.ErrClosed)
		l.drain()
		err = l.closeRemote()
	})
	return err
}

// drain closes the connections queued for Accept.
func (l *listener) drain() {
	for {
		select {
		case conn := <-l.queue:
			conn.Close()
		default:
			return
		}
	}
}

// closeRemote stops the plugin's side of the listener (best effort once
// the plugin is gone).
func (l *listener) closeRemote() error {
	if l.c.check() != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.c.cfg.CallTimeout)
	defer cancel()
	if _, err := l.c.rpc.CloseListener(ctx, &transportv1.CloseListenerRequest{Id: l.id}); err != nil {
		err = fromStatus(err)
		if errors.Is(err, ErrPluginShutdown) {
			return nil
		}
		return fmt.Errorf("transportplugin: close listener %s: %w", l.Addr(), err)
	}
	return nil
}

// Addr is the address the plugin's listener is bound to.
func (l *listener) Addr() net.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.addr == nil {
		return opaqueAddr{"tcp", ""}
	}
	return l.addr
}

// pluginAddr rebuilds the plugin listener's address: a *net.TCPAddr for
// tcp, a *net.UnixAddr for unix, else an opaque one.
func pluginAddr(network, addr string) net.Addr {
	switch network {
	case "tcp", "tcp4", "tcp6":
		if ap, err := net.ResolveTCPAddr(network, addr); err == nil {
			return ap
		}
	case "unix", "unixpacket":
		return &net.UnixAddr{Name: addr, Net: network}
	}
	return opaqueAddr{network, addr}
}

type opaqueAddr struct{ network, addr string }

func (a opaqueAddr) Network() string { return a.network }
func (a opaqueAddr) String() string  { return a.addr }
