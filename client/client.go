package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"

	"github.com/replicatorhq/replicator/sdk/proto/producerv1"

	"github.com/replicatorhq/replicator/internal/budget"
	"github.com/replicatorhq/replicator/internal/producerwire"
)

// Message is one producer message.
type Message struct {
	Topic   string
	QueueID int32
	Body    []byte
	// Tags and Keys are RocketMQ's TAGS and KEYS properties.
	Tags, Keys string
	// Properties are other message properties.
	Properties map[string]string
}

// Property names of Message.Tags and Message.Keys.
const (
	PropertyTags = "TAGS"
	PropertyKeys = "KEYS"
)

// Status is the outcome of a stored put, as RocketMQ's PutMessageStatus:
// the message is stored on the master whatever the value.
type Status int

const (
	PutOK             Status = iota // PUT_OK: stored and, on a sync master, replicated
	FlushDiskTimeout                // FLUSH_DISK_TIMEOUT
	FlushSlaveTimeout               // FLUSH_SLAVE_TIMEOUT: stored, not yet acknowledged by the slaves
	SlaveNotAvailable               // SLAVE_NOT_AVAILABLE: stored, no slave to replicate to
)

// String is the status's name on the producer stream (producer.proto's
// Status, where PUT_OK is 1), or UNKNOWN.
func (s Status) String() string {
	if s < PutOK || s > SlaveNotAvailable {
		return "UNKNOWN"
	}
	return producerv1.Status(s + 1).String()
}

// Result is a stored put.
type Result struct {
	Status      Status
	Offset      int64 // physical commit-log offset of the record
	NextOffset  int64 // offset after the record
	QueueOffset int64
	Node        string // the node that stored it (host:port)
	// Epoch and BrokerID (autoswitch and controller-mode nodes; 0 on a
	// classic master): the master epoch the put was stored and
	// acknowledged in, and the broker id of the node that acknowledged it.
	Epoch    int32
	BrokerID int64
}

// Defaults of the options.
const (
	DefaultMaxBatchBytes    = 1 << 20
	DefaultMaxBatchMessages = 1024
	DefaultMaxInflightBytes = 16 << 20
	DefaultMaxMessageBytes  = 4 << 20 // the node's default --max-message-size
	DefaultRetryTimeout     = 30 * time.Second
	// DefaultIdleTimeout: a producer stream that sent no batch this long
	// is closed by the producer (a node ends streams idle for 2 minutes by
	// default, and says how long in each stream's headers: the producer
	// closes at half of that when it is shorter).
	DefaultIdleTimeout = 30 * time.Second
	// DefaultMaxBatchesInFlight: batches sent and not wholly answered
	// before the next batch waits (and grows).
	DefaultMaxBatchesInFlight = 2
	// messageCost is what a message costs in flight beyond its body.
	messageCost = 128
	minBackoff  = 10 * time.Millisecond
	maxBackoff  = time.Second
	// keepaliveTime and keepaliveTimeout: a ping after this long without
	// traffic, and the connection ends if it is not answered in time.
	keepaliveTime    = 10 * time.Second
	keepaliveTimeout = 5 * time.Second
)

type options struct {
	token            string
	tls              *tls.Config
	linger           time.Duration
	maxBatchBytes    int
	maxBatchMessages int
	maxBatches       int
	maxInflightBytes int64
	maxMessageBytes  int
	retryTimeout     time.Duration
	idleTimeout      time.Duration
	noFollow         bool
	logger           hclog.Logger
	// newTimer makes the idle timer (tests replace it).
	newTimer func(time.Duration) (<-chan time.Time, func() bool)
}

// Option configures Dial.
type Option func(*options)

// WithToken sends the API token (the node's --token-file) as
// "authorization: Bearer <token>".
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithTLS connects with TLS (as an https:// address does); cfg holds the
// CA and, for nodes that require one, the client certificate. nil takes the
// system roots.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) {
		if cfg == nil {
			cfg = &tls.Config{}
		}
		o.tls = cfg.Clone()
	}
}

// WithLinger makes a batch wait up to d for more messages before it is
// sent (default 0: a batch leaves as soon as the stream can take it, and
// holds what was sent while the previous one was written).
func WithLinger(d time.Duration) Option { return func(o *options) { o.linger = max(0, d) } }

// WithMaxBatch caps a batch at bytes of message bodies and at msgs
// messages (defaults DefaultMaxBatchBytes, DefaultMaxBatchMessages; the
// node takes at most 4096 messages and its message size limit plus 256 KiB
// per batch).
func WithMaxBatch(bytes, msgs int) Option {
	return func(o *options) {
		if bytes > 0 {
			o.maxBatchBytes = bytes
		}
		if msgs > 0 {
			o.maxBatchMessages = min(msgs, 4096)
		}
	}
}

// WithMaxBatchesInFlight is how many batches may be sent and not wholly
// answered (default DefaultMaxBatchesInFlight): past it the next batch
// waits for an answer, gathering the messages sent meanwhile, so that many
// concurrent senders share few, large batches, while a lone sender's
// message leaves at once.
func WithMaxBatchesInFlight(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxBatches = n
		}
	}
}

// WithMaxInflightBytes bounds the bytes of messages sent or queued and not
// answered (default DefaultMaxInflightBytes): past it Send and SendAsync
// block. One message larger than the bound is taken alone.
func WithMaxInflightBytes(n int64) Option {
	return func(o *options) {
		if n > 0 {
			o.maxInflightBytes = n
		}
	}
}

// WithMaxMessageBytes is the body size refused locally with ErrTooLarge
// (default DefaultMaxMessageBytes, the node's default limit; the node
// checks its own).
func WithMaxMessageBytes(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxMessageBytes = n
		}
	}
}

// WithRetryTimeout is how long a message that is certainly not stored
// (no node reachable, a slave or a demoted master answered, the node
// shutting down) is sent again, to the next address or the master a slave
// names (default DefaultRetryTimeout). A Send's context deadline bounds it
// too.
func WithRetryTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.retryTimeout = d
		}
	}
}

// WithIdleTimeout makes the producer close a stream that sent no batch
// for d (default DefaultIdleTimeout), or for half the node's idle timeout
// when that is shorter: the node's own idle close would race a batch sent
// at that moment, whose messages could then only be reported "may be
// stored". The next message opens a new stream.
func WithIdleTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.idleTimeout = d
		}
	}
}

// WithFollowMaster(false) makes a put that a slave or a demoted master
// refuses, or that a node without a known master refuses (an election),
// fail at once with ErrNoMaster (not stored), instead of going to the
// master the node names or to the next address (the default).
func WithFollowMaster(follow bool) Option { return func(o *options) { o.noFollow = !follow } }

// WithLogger logs connection changes (nil: none).
func WithLogger(l hclog.Logger) Option { return func(o *options) { o.logger = l } }

// Producer sends messages to the master among its nodes over one
// producer stream (gRPC, on the node's API port). Safe for concurrent use.
type Producer struct {
	opts options
	log  hclog.Logger

	mu      sync.Mutex
	addrs   []string // host:port
	secure  map[string]bool
	cur     int
	conns   map[string]*grpc.ClientConn
	queue   []*Future
	closed  bool
	pending int // futures not completed

	wake    chan struct{}           // queue changed (cap 1)
	active  atomic.Pointer[session] // the open stream, nil between streams
	idle    chan struct{}           // closed and replaced when pending reaches 0
	budget  *budget.Budget
	closeCh chan struct{}
	runDone chan struct{}
}

// Dial returns a producer for the nodes at addrs: API base URLs
// (http://host:port, https://host:port) or host:port. It connects to the
// first node that answers and follows the master from there; it fails
// when none of addrs is valid, or when ctx ends before a node answered.
func Dial(ctx context.Context, addrs []string, opts ...Option) (*Producer, error) {
	o := options{
		maxBatchBytes:    DefaultMaxBatchBytes,
		maxBatchMessages: DefaultMaxBatchMessages,
		maxBatches:       DefaultMaxBatchesInFlight,
		maxInflightBytes: DefaultMaxInflightBytes,
		maxMessageBytes:  DefaultMaxMessageBytes,
		retryTimeout:     DefaultRetryTimeout,
		idleTimeout:      DefaultIdleTimeout,
		newTimer:         realTimer,
	}
	for _, opt := range opts {
		opt(&o)
	}
	log := o.logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	p := &Producer{
		opts: o, log: log, secure: map[string]bool{}, conns: map[string]*grpc.ClientConn{},
		wake: make(chan struct{}, 1), idle: make(chan struct{}), budget: budget.New(o.maxInflightBytes),
		closeCh: make(chan struct{}), runDone: make(chan struct{}),
	}
	if len(addrs) == 0 {
		return nil, errors.New("client: Dial needs at least one node address")
	}
	for _, a := range addrs {
		hp, secure, err := parseAddr(a)
		if err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		p.addAddrLocked(hp, secure || o.tls != nil)
	}
	if err := p.probe(ctx); err != nil {
		p.closeConns()
		return nil, err
	}
	go p.run()
	return p, nil
}

// probe finds the first address that accepts a connection: TCP, and for
// TLS a handshake and the server's first bytes (its HTTP/2 settings), so
// that a refused client certificate fails Dial with the server's alert.
func (p *Producer) probe(ctx context.Context) error {
	var errs []error
	for i, a := range p.addrs {
		err := p.probeOne(ctx, a)
		if err == nil {
			p.cur = i
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("client: no node answered: %w", errors.Join(append(errs, ctx.Err())...))
		}
		errs = append(errs, err)
	}
	if refusedAll(errs) {
		return fmt.Errorf("client: no node answered: %w: %w: %w", ErrUnavailable, ErrNoListener, errors.Join(errs...))
	}
	return fmt.Errorf("client: no node answered: %w: %w", ErrUnavailable, errors.Join(errs...))
}

// refusedAll reports whether every error is a refused connection.
func refusedAll(errs []error) bool {
	for _, err := range errs {
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return false
		}
	}
	return len(errs) > 0
}

// probeTimeout bounds the wait for a TLS server's first bytes.
const probeTimeout = 5 * time.Second

func (p *Producer) probeOne(ctx context.Context, hp string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", hp)
	if err != nil {
		return err
	}
	defer c.Close()
	if !p.secure[hp] {
		return nil
	}
	cfg := &tls.Config{}
	if p.opts.tls != nil {
		cfg = p.opts.tls.Clone()
	}
	cfg.NextProtos = []string{"h2"}
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(hp)
	}
	tc := tls.Client(c, cfg)
	deadline := time.Now().Add(probeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	tc.SetDeadline(deadline)
	if err := tc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("%s: TLS: %w", hp, err)
	}
	var b [1]byte
	if _, err := tc.Read(b[:]); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil // connected; the server said nothing yet
		}
		return fmt.Errorf("%s: TLS: %w", hp, err)
	}
	return nil
}

// parseAddr returns host:port and whether the address asks for TLS.
func parseAddr(a string) (string, bool, error) {
	a = strings.TrimSpace(a)
	if strings.Contains(a, "://") {
		u, err := url.Parse(a)
		if err != nil {
			return "", false, fmt.Errorf("invalid node address %q: %v", a, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return "", false, fmt.Errorf("invalid node address %q: scheme %q (want http or https)", a, u.Scheme)
		}
		if u.Host == "" || (u.Path != "" && u.Path != "/") {
			return "", false, fmt.Errorf("invalid node address %q: want SCHEME://HOST:PORT", a)
		}
		host := u.Host
		if u.Port() == "" {
			if u.Scheme == "https" {
				host += ":443"
			} else {
				host += ":80"
			}
		}
		return host, u.Scheme == "https", nil
	}
	if !strings.Contains(a, ":") || strings.HasSuffix(a, ":") {
		return "", false, fmt.Errorf("invalid node address %q: want HOST:PORT or an http(s):// URL", a)
	}
	return a, false, nil
}

func (p *Producer) addAddrLocked(hp string, secure bool) int {
	for i, a := range p.addrs {
		if a == hp {
			return i
		}
	}
	p.addrs = append(p.addrs, hp)
	p.secure[hp] = secure
	return len(p.addrs) - 1
}

// conn returns the (lazy) client connection to hp.
func (p *Producer) conn(hp string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cc, ok := p.conns[hp]; ok {
		return cc, nil
	}
	creds := insecure.NewCredentials()
	if p.secure[hp] {
		cfg := &tls.Config{}
		if p.opts.tls != nil {
			cfg = p.opts.tls.Clone()
		}
		// The node's native stream transport first; a node that does not
		// know it picks h2 and serves the stream through its HTTP server.
		cfg.NextProtos = []string{producerv1.ALPNProtocol, "h2"}
		creds = credentials.NewTLS(cfg)
	}
	cc, err := grpc.NewClient("passthrough:///"+hp,
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallSendMsgSize(max(p.opts.maxBatchBytes, p.opts.maxMessageBytes)+256<<10),
			grpc.MaxCallRecvMsgSize(16<<20),
			// Batches encode and decode themselves (producerwire: the
			// same protobuf bytes, no reflection, no Result per answer).
			grpc.ForceCodecV2(producerwire.Codec{})),
		// Buffers that are not zeroed on reuse (gRPC's default pool
		// zeroes a whole 32 KiB or 1 MiB tier for every batch).
		experimental.WithBufferPool(producerwire.Pool),
		grpc.WithInitialWindowSize(1<<20),
		grpc.WithInitialConnWindowSize(4<<20),
		// A node that stops answering (a paused or partitioned host) ends
		// the stream: its messages in flight get "may be stored" instead
		// of waiting for ever.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
	)
	if err != nil {
		return nil, fmt.Errorf("client: %s: %w", hp, err)
	}
	p.conns[hp] = cc
	return cc, nil
}

// Future is the pending result of SendAsync.
type Future struct {
	p        *Producer
	msg      outMsg
	cost     int64
	ctx      context.Context // Send's; nil for SendAsync
	deadline time.Time
	state    atomic.Int32
	lastErr  *PutError
	batch    *batchRef // the batch that carries it (session)
	done     chan struct{}
	res      Result
	err      error
}

// outMsg is a message as the stream sends it (producer.proto's Message).
type outMsg struct {
	seq     uint64 // set when a batch takes it
	topic   string
	queueID int32
	body    []byte
	props   map[string]string
}

// Future states.
const (
	stQueued int32 = iota
	stSent
	stCancelled
	stDone
)

// Done is closed when the result is known.
func (f *Future) Done() <-chan struct{} { return f.done }

// Result waits for the result.
func (f *Future) Result() (Result, error) {
	<-f.done
	return f.res, f.err
}

// Wait waits for the result until ctx ends; then it returns ctx's error
// (the put goes on).
func (f *Future) Wait(ctx context.Context) (Result, error) {
	select {
	case <-f.done:
		return f.res, f.err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// complete resolves f once; it reports whether this call did.
func (f *Future) complete(res Result, err error) bool {
	if !f.resolve(res, err) {
		return false
	}
	f.p.completed(f.cost, 1)
	return true
}

// resolve resolves f once without giving back its in-flight bytes and its
// count (completed, which the caller calls for several futures at once);
// it reports whether this call did.
func (f *Future) resolve(res Result, err error) bool {
	for {
		s := f.state.Load()
		if s == stDone {
			return false
		}
		if f.state.CompareAndSwap(s, stDone) {
			break
		}
	}
	f.res, f.err = res, err
	close(f.done)
	return true
}

// completed gives back the in-flight bytes (cost) and the count (n) of
// resolved futures.
func (p *Producer) completed(cost int64, n int) {
	p.budget.Release(cost)
	p.mu.Lock()
	p.pending -= n
	if p.pending == 0 {
		close(p.idle)
		p.idle = make(chan struct{})
	}
	p.mu.Unlock()
}

// Send stores msg and returns its result. When ctx ends first, Send returns
// a *PutError with ctx's error as Kind: NotStored if the message had not
// left the producer (it will not), MaybeStored if it had.
func (p *Producer) Send(ctx context.Context, msg *Message) (Result, error) {
	f, err := p.enqueue(ctx, msg)
	if err != nil {
		return Result{}, err
	}
	cdone := ctx.Done()
	if cdone == nil {
		<-f.done
		return f.res, f.err
	}
	select {
	case <-f.done:
		return f.res, f.err
	case <-cdone:
	}
	if f.state.CompareAndSwap(stQueued, stCancelled) {
		f.complete(Result{}, &PutError{Storage: NotStored, Kind: ctx.Err(), Message: "cancelled before it was sent"})
		return f.res, f.err
	}
	select {
	case <-f.done:
		return f.res, f.err
	default:
	}
	return Result{}, &PutError{Storage: MaybeStored, Kind: ctx.Err(), Message: "cancelled after it was sent; its result is unknown"}
}

// SendAsync queues msg and returns its future at once, unless the
// in-flight bytes are at their bound (WithMaxInflightBytes): then it blocks
// until earlier puts answered. A message refused locally (too large,
// producer closed) has a completed future.
func (p *Producer) SendAsync(msg *Message) *Future {
	f, err := p.enqueue(nil, msg)
	if err != nil {
		f = &Future{done: make(chan struct{}), err: err}
		f.state.Store(stDone)
		close(f.done)
	}
	return f
}

// SendBatch sends msgs concurrently and returns their results and errors
// in the order of msgs.
func (p *Producer) SendBatch(ctx context.Context, msgs []*Message) ([]Result, []error) {
	fs := make([]*Future, len(msgs))
	errs := make([]error, len(msgs))
	res := make([]Result, len(msgs))
	for i, m := range msgs {
		f, err := p.enqueue(ctx, m)
		if err != nil {
			errs[i] = err
			continue
		}
		fs[i] = f
	}
	for i, f := range fs {
		if f == nil {
			continue
		}
		select {
		case <-f.done:
			res[i], errs[i] = f.res, f.err
			continue
		case <-ctx.Done():
		}
		if f.state.CompareAndSwap(stQueued, stCancelled) {
			f.complete(Result{}, &PutError{Storage: NotStored, Kind: ctx.Err(), Message: "cancelled before it was sent"})
			errs[i] = f.err
		} else {
			select {
			case <-f.done:
				res[i], errs[i] = f.res, f.err
			default:
				errs[i] = &PutError{Storage: MaybeStored, Kind: ctx.Err(), Message: "cancelled after it was sent; its result is unknown"}
			}
		}
	}
	return res, errs
}

// enqueue checks msg, waits for budget and queues it.
func (p *Producer) enqueue(ctx context.Context, msg *Message) (*Future, error) {
	if msg == nil {
		return nil, &PutError{Storage: NotStored, Kind: ErrInvalidMessage, Message: "nil message"}
	}
	if len(msg.Body) > p.opts.maxMessageBytes {
		return nil, &PutError{Storage: NotStored, Kind: ErrTooLarge, Message: fmt.Sprintf("body of %d bytes is larger than the limit of %d bytes", len(msg.Body), p.opts.maxMessageBytes)}
	}
	pm := outMsg{topic: msg.Topic, queueID: msg.QueueID, body: msg.Body}
	cost := int64(len(msg.Body)+len(msg.Topic)) + messageCost
	if len(msg.Properties) > 0 || msg.Tags != "" || msg.Keys != "" {
		pm.props = make(map[string]string, len(msg.Properties)+2)
		for k, v := range msg.Properties {
			pm.props[k] = v
			cost += int64(len(k) + len(v))
		}
		if msg.Tags != "" {
			pm.props[PropertyTags] = msg.Tags
		}
		if msg.Keys != "" {
			pm.props[PropertyKeys] = msg.Keys
		}
		cost += int64(len(msg.Tags) + len(msg.Keys))
	}
	wctx := ctx
	if wctx == nil {
		wctx = context.Background()
	}
	if err := p.budget.Acquire(wctx, p.closeCh, cost); err != nil {
		if errors.Is(err, budget.ErrStopped) {
			err = ErrClosed
		}
		return nil, &PutError{Storage: NotStored, Kind: err, Message: "waiting for in-flight room"}
	}
	f := &Future{p: p, msg: pm, cost: cost, ctx: ctx, done: make(chan struct{})}
	f.deadline = time.Now().Add(p.opts.retryTimeout)
	if ctx != nil {
		if d, ok := ctx.Deadline(); ok && d.Before(f.deadline) {
			f.deadline = d
		}
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.budget.Release(cost)
		return nil, &PutError{Storage: NotStored, Kind: ErrClosed}
	}
	p.pending++
	p.queue = append(p.queue, f)
	p.mu.Unlock()
	if s := p.active.Load(); s == nil || !s.sendNow() {
		p.signal()
	}
	return f, nil
}

func (p *Producer) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// requeue puts futures that were certainly not stored back at the head of
// the queue, or fails those past their deadline (or whose Send returned)
// with their last error.
func (p *Producer) requeue(fs []*Future) {
	now := time.Now()
	var back []*Future
	for _, f := range fs {
		if !f.state.CompareAndSwap(stSent, stQueued) {
			continue
		}
		if now.After(f.deadline) || (f.ctx != nil && f.ctx.Err() != nil) {
			f.complete(Result{}, f.lastErr)
			continue
		}
		back = append(back, f)
	}
	if len(back) == 0 {
		return
	}
	p.mu.Lock()
	p.queue = append(back, p.queue...)
	p.mu.Unlock()
	p.signal()
}

// failQueued fails the queued futures past their deadline (all of them
// with all) with their last error, else mk's (no node reachable).
func (p *Producer) failQueued(all bool, mk func(*Future) *PutError) {
	now := time.Now()
	p.mu.Lock()
	keep := p.queue[:0]
	var fail []*Future
	for _, f := range p.queue {
		if f.state.Load() == stCancelled {
			continue
		}
		if all || now.After(f.deadline) || (f.ctx != nil && f.ctx.Err() != nil) {
			fail = append(fail, f)
			continue
		}
		keep = append(keep, f)
	}
	clear(p.queue[len(keep):])
	p.queue = keep
	p.mu.Unlock()
	for _, f := range fail {
		if f.state.CompareAndSwap(stQueued, stSent) {
			e := f.lastErr
			if e == nil {
				e = mk(f)
			}
			f.complete(Result{}, e)
		}
	}
}

// Close stops taking messages, waits until every message sent or queued
// has its result (each is retried at most its retry timeout), and closes
// the connections.
func (p *Producer) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.runDone
		return nil
	}
	p.closed = true
	for p.pending > 0 {
		idle := p.idle
		p.mu.Unlock()
		<-idle
		p.mu.Lock()
	}
	p.mu.Unlock()
	close(p.closeCh)
	p.signal()
	<-p.runDone
	p.closeConns()
	return nil
}

func (p *Producer) closeConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for hp, cc := range p.conns {
		cc.Close()
		delete(p.conns, hp)
	}
}

// Addrs returns the node addresses the producer knows (host:port), the
// current target first.
func (p *Producer) Addrs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []string{p.addrs[p.cur]}
	for i, a := range p.addrs {
		if i != p.cur {
			out = append(out, a)
		}
	}
	return out
}

// realTimer is options.newTimer outside tests.
func realTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}
