package remoting

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// Registration with name servers, as a RocketMQ broker does
// (BrokerController.registerBrokerAll, BrokerOuterAPI.registerBrokerAll and
// unregisterBrokerAll): at start, then every registerNameServerPeriod, and
// at once after a role change (RocketMQ 5's registerBrokerWhenRoleChange),
// a REGISTER_BROKER to every name server concurrently; an UNREGISTER_BROKER
// to each at a graceful stop.

// Registration periods (BrokerConfig.registerNameServerPeriod, clamped by
// BrokerController to [10 s, 60 s]).
const (
	DefaultRegisterInterval = 30 * time.Second
	MinRegisterInterval     = 10 * time.Second
	MaxRegisterInterval     = 60 * time.Second
	// DefaultRegisterTimeout bounds one name server's call: RocketMQ
	// 4.9's registerBrokerTimeoutMills (6 s).
	DefaultRegisterTimeout = 6 * time.Second
	// DefaultUnregisterTimeout bounds one UNREGISTER_BROKER call (RocketMQ
	// waits 3 s).
	DefaultUnregisterTimeout = 3 * time.Second
	// DefaultNamesrvMaxFrame bounds a name server's answer, length field
	// included: a header with two addresses and the order-topic KV table.
	DefaultNamesrvMaxFrame = 4 << 20
)

// RegistrarConfig configures a Registrar.
type RegistrarConfig struct {
	// Namesrvs are the name servers' host:port addresses (at least one).
	Namesrvs []string
	// Dial connects to a name server; nil means a plain TCP dialer.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Topics returns the broker's TopicConfigSerializeWrapper JSON, the
	// topicConfigSerializeWrapper of each registration's body.
	Topics func(ctx context.Context) ([]byte, error)
	// Interval between rounds (0: DefaultRegisterInterval).
	Interval time.Duration
	// Timeout bounds one name server's REGISTER_BROKER call, dial included
	// (0: DefaultRegisterTimeout); UNREGISTER_BROKER gets
	// DefaultUnregisterTimeout or less.
	Timeout time.Duration
	// MaxFrameSize bounds the answers (0: DefaultNamesrvMaxFrame).
	MaxFrameSize int
	// OnResult, when set, gets every successful registration's answer
	// (on the registering goroutine; keep it short).
	OnResult   func(namesrv string, res RegisterResult)
	Logger     hclog.Logger
	Registerer prometheus.Registerer
}

type registrarMetrics struct {
	registrations   *prometheus.CounterVec
	unregistrations *prometheus.CounterVec
	registered      prometheus.Gauge
}

func newRegistrarMetrics(r prometheus.Registerer) (*registrarMetrics, error) {
	m := &registrarMetrics{}
	var err error
	if m.registrations, err = register(r, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "replicator_remoting_namesrv_registrations_total",
		Help: "REGISTER_BROKER calls to name servers, by outcome (ok, error).",
	}, []string{"outcome"})); err != nil {
		return nil, err
	}
	if m.unregistrations, err = register(r, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "replicator_remoting_namesrv_unregistrations_total",
		Help: "UNREGISTER_BROKER calls to name servers at a graceful stop, by outcome (ok, error).",
	}, []string{"outcome"})); err != nil {
		return nil, err
	}
	if m.registered, err = register(r, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "replicator_remoting_namesrv_registered",
		Help: "Name servers whose last REGISTER_BROKER succeeded.",
	})); err != nil {
		return nil, err
	}
	return m, nil
}

// Registrar keeps a broker registered with its name servers. Failures are
// logged (Warn, with the name server and the error) and counted, never
// fatal: the next round tries again.
type Registrar struct {
	cfg     RegistrarConfig
	log     hclog.Logger
	metrics *registrarMetrics
	peers   []*namesrvPeer

	mu      sync.Mutex
	reg     BrokerRegistration
	started bool
	closed  bool

	trigger chan struct{}
	stop    chan struct{}
	done    chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
}

// namesrvPeer is one name server: its connection (kept between rounds,
// dialled again after a failure) and its last state, used by one goroutine
// at a time.
type namesrvPeer struct {
	addr   string
	client *Client
	ok     bool   // the last registration succeeded
	master string // the last masterAddr answered
}

// NewRegistrar checks cfg and registers the metrics.
func NewRegistrar(cfg RegistrarConfig) (*Registrar, error) {
	if len(cfg.Namesrvs) == 0 {
		return nil, errors.New("remoting: registrar: no name server")
	}
	if cfg.Topics == nil {
		return nil, errors.New("remoting: registrar: no topic source")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultRegisterInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultRegisterTimeout
	}
	if cfg.MaxFrameSize <= 0 {
		cfg.MaxFrameSize = DefaultNamesrvMaxFrame
	}
	if cfg.Dial == nil {
		var d net.Dialer
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	m, err := newRegistrarMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	r := &Registrar{cfg: cfg, log: cfg.Logger, metrics: m, trigger: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	for _, a := range cfg.Namesrvs {
		r.peers = append(r.peers, &namesrvPeer{addr: a})
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

// Start registers reg with every name server at once and then every
// Interval, until Close. It may be called once.
func (r *Registrar) Start(reg BrokerRegistration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started || r.closed {
		return errors.New("remoting: registrar already started or closed")
	}
	r.started, r.reg = true, reg
	go r.run()
	return nil
}

// Update replaces the registration (a role change: broker id 0 on a new
// master, the broker's own id on a new slave) and registers it with every
// name server at once, as RocketMQ 5 does after a role change.
func (r *Registrar) Update(reg BrokerRegistration) {
	r.mu.Lock()
	r.reg = reg
	r.mu.Unlock()
	select {
	case r.trigger <- struct{}{}:
	default:
	}
}

// Registration returns the registration the next round sends.
func (r *Registrar) Registration() BrokerRegistration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reg
}

func (r *Registrar) run() {
	defer close(r.done)
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		r.round()
		select {
		case <-r.stop:
			return
		case <-t.C:
		case <-r.trigger:
			t.Reset(r.cfg.Interval)
		}
	}
}

// round registers with every name server concurrently and waits for all.
func (r *Registrar) round() {
	reg := r.Registration()
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.Timeout)
	defer cancel()
	req, err := r.request(ctx, reg)
	if err != nil {
		r.log.Warn("cannot build the name-server registration; not registered this round", "error", err)
		for _, p := range r.peers {
			r.failed(p, "register", err)
		}
		return
	}
	var wg sync.WaitGroup
	for _, p := range r.peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each call gets its own copy: Invoke sets the opaque.
			c := *req
			r.registerOne(ctx, p, reg, &c)
		}()
	}
	wg.Wait()
}

func (r *Registrar) request(ctx context.Context, reg BrokerRegistration) (*Command, error) {
	topics, err := r.cfg.Topics(ctx)
	if err != nil {
		return nil, fmt.Errorf("topic config: %w", err)
	}
	body, err := RegisterBrokerBody(topics)
	if err != nil {
		return nil, err
	}
	return NewRegisterBroker(reg, body)
}

func (r *Registrar) registerOne(ctx context.Context, p *namesrvPeer, reg BrokerRegistration, req *Command) {
	resp, err := r.invoke(ctx, p, req)
	var res RegisterResult
	if err == nil {
		res, err = ParseRegisterResponse(resp)
	}
	if err != nil {
		r.failed(p, "register", err)
		return
	}
	r.metrics.registrations.WithLabelValues("ok").Inc()
	if !p.ok {
		p.ok = true
		r.metrics.registered.Inc()
		r.log.Info("registered with the name server", "namesrv", p.addr, "cluster", reg.ClusterName,
			"broker_name", reg.BrokerName, "broker_id", reg.BrokerID, "broker_addr", reg.BrokerAddr, "ha_addr", reg.HAServerAddr)
	}
	if res.MasterAddr != p.master {
		r.log.Info("the name server reports the group's master", "namesrv", p.addr, "master_addr", res.MasterAddr, "master_ha_addr", res.HAServerAddr)
		p.master = res.MasterAddr
	}
	if r.cfg.OnResult != nil {
		r.cfg.OnResult(p.addr, res)
	}
}

func (r *Registrar) failed(p *namesrvPeer, op string, err error) {
	if op == "register" {
		r.metrics.registrations.WithLabelValues("error").Inc()
		if p.ok {
			p.ok = false
			r.metrics.registered.Dec()
		}
	} else {
		r.metrics.unregistrations.WithLabelValues("error").Inc()
	}
	if r.ctx.Err() != nil && op == "register" {
		return // closing: the round was cut short on purpose
	}
	r.log.Warn("name server "+op+" failed", "namesrv", p.addr, "error", err)
}

// invoke sends req to p on its connection, dialling it first when needed;
// a failed call drops the connection.
func (r *Registrar) invoke(ctx context.Context, p *namesrvPeer, req *Command) (*Command, error) {
	if p.client == nil {
		conn, err := r.cfg.Dial(ctx, p.addr)
		if err != nil {
			return nil, fmt.Errorf("remoting: dial name server %s: %w", p.addr, err)
		}
		p.client = NewClient(conn, r.cfg.MaxFrameSize)
	}
	resp, err := p.client.Invoke(ctx, req)
	if err != nil {
		p.client.Close()
		p.client = nil
		return nil, err
	}
	return resp, nil
}

// Close stops the rounds and, when the registrar was started, sends
// UNREGISTER_BROKER for the current registration to every name server
// concurrently (each bounded by DefaultUnregisterTimeout and ctx), then
// closes the connections. It returns the unregistration errors joined (they
// are also logged and counted). Idempotent.
func (r *Registrar) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	started, reg := r.started, r.reg
	r.mu.Unlock()
	r.cancel()
	if !started {
		return nil
	}
	close(r.stop)
	<-r.done
	req, err := NewUnregisterBroker(reg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, min(DefaultUnregisterTimeout, r.cfg.Timeout))
	defer cancel()
	errs := make([]error, len(r.peers))
	var wg sync.WaitGroup
	for i, p := range r.peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := *req
			resp, err := r.invoke(ctx, p, &c)
			if err == nil {
				_, err = ParseRegisterResponse(resp)
			}
			if p.client != nil {
				p.client.Close()
				p.client = nil
			}
			if p.ok {
				p.ok = false
				r.metrics.registered.Dec()
			}
			if err != nil {
				r.failed(p, "unregister", err)
				errs[i] = fmt.Errorf("unregister from %s: %w", p.addr, err)
				return
			}
			r.metrics.unregistrations.WithLabelValues("ok").Inc()
			r.log.Info("unregistered from the name server", "namesrv", p.addr, "broker_id", reg.BrokerID)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
