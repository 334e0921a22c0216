package metadata

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/internal/promreg"
	"github.com/replicatorhq/replicator/sdk/meta"
)

// Syncer defaults.
const (
	DefaultSyncInterval = 10 * time.Second // RocketMQ 4.5+: every 10 s
	DefaultSyncTimeout  = 30 * time.Second // one round, every request included
)

// LocalStore is the slave's side of a Syncer: it reads the local versions
// and applies what changed. *Store implements it.
type LocalStore interface {
	meta.Source
	meta.Sink
}

// SyncerConfig configures NewSyncer.
type SyncerConfig struct {
	// Master is where the metadata comes from (an HTTPSource). REQUIRED.
	Master meta.Source
	// Local is the slave's store. REQUIRED.
	Local LocalStore
	// Interval between rounds; 0 means DefaultSyncInterval.
	Interval time.Duration
	// Timeout bounds one round; 0 means DefaultSyncTimeout.
	Timeout time.Duration
	// Merge names the documents merged instead of replaced; nil means
	// DefaultMerge() (consumerOffset.json), an empty map merges nothing.
	Merge map[string]MergeFunc
	// Clock drives the ticker and the last-sync metric; nil means
	// SystemClock().
	Clock Clock
	// Logger; nil means no logging.
	Logger hclog.Logger
	// Registerer receives the syncer's metrics; nil registers none.
	Registerer prometheus.Registerer
	// AfterRound, if set, is called after every round with its result, on
	// the goroutine that ran the round. It must not block for long. Tests
	// use it to wait for rounds without sleeping.
	AfterRound func(SyncResult)
}

// SyncResult describes one round.
type SyncResult struct {
	// Applied lists the documents applied locally, sorted by name.
	Applied []string
	// Deleted lists the local documents deleted because the master no
	// longer has them, sorted by name.
	Deleted []string
	// Bytes counts the document bytes fetched from the master.
	Bytes int64
	// Err is nil for a successful round.
	Err error
}

// SyncStatus is a snapshot of a Syncer's health.
type SyncStatus struct {
	Healthy     bool      // the last round succeeded
	LastSuccess time.Time // end of the last successful round; zero if none
	LastError   error     // error of the last round; nil if it succeeded
	Rounds      uint64    // rounds run
	Failures    uint64    // rounds failed
}

type syncState int

const (
	stateStarting syncState = iota
	stateHealthy
	stateFailing
)

type syncMetrics struct {
	lastSync prometheus.Gauge
	failures prometheus.Counter
	applied  prometheus.Counter
	deleted  prometheus.Counter
	bytes    prometheus.Counter
}

func newSyncMetrics(reg prometheus.Registerer) (*syncMetrics, error) {
	m := &syncMetrics{
		lastSync: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "replicator_metadata_last_sync_timestamp_seconds",
			Help: "Unix time of the end of the last successful metadata sync round.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "replicator_metadata_sync_failures_total",
			Help: "Metadata sync rounds that failed (master unreachable, answer malformed, local apply failed).",
		}),
		applied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "replicator_metadata_documents_applied_total",
			Help: "Metadata documents applied locally by the syncer.",
		}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "replicator_metadata_documents_deleted_total",
			Help: "Local metadata documents deleted by the syncer because the master no longer has them.",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "replicator_metadata_sync_bytes_total",
			Help: "Bytes of metadata documents fetched from the master.",
		}),
	}
	if reg != nil {
		// A node that changes role at runtime creates a new Syncer on the
		// same registerer: it takes over the registered collectors, so
		// counts are never lost.
		var err error
		if m.lastSync, err = registerSync(reg, m.lastSync); err != nil {
			return nil, err
		}
		for _, c := range []*prometheus.Counter{&m.failures, &m.applied, &m.deleted, &m.bytes} {
			if *c, err = registerSync(reg, *c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// registerSync registers c, or returns the collector already registered
// under its name when it has c's type.
func registerSync[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	c, err := promreg.Register(reg, c)
	if err != nil {
		return c, fmt.Errorf("metadata: register metrics: %w", err)
	}
	return c, nil
}

// Syncer is the slave's timer-driven metadata sync (RocketMQ's
// SlaveSynchronize). Its methods are safe for concurrent use. Rounds never
// overlap: the loop's rounds and SyncOnce calls are serialised.
type Syncer struct {
	cfg     SyncerConfig
	log     hclog.Logger
	metrics *syncMetrics
	trigger chan struct{}

	roundMu sync.Mutex // held for a whole round; taken before mu

	mu      sync.Mutex
	state   syncState
	status  SyncStatus
	started bool
	closed  bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// NewSyncer validates cfg, registers the metrics and returns a stopped
// Syncer; Start runs it.
func NewSyncer(cfg SyncerConfig) (*Syncer, error) {
	if cfg.Master == nil || cfg.Local == nil {
		return nil, errors.New("metadata: SyncerConfig.Master and Local are required")
	}
	if cfg.Interval < 0 || cfg.Timeout < 0 {
		return nil, errors.New("metadata: negative Interval or Timeout")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultSyncInterval
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultSyncTimeout
	}
	if cfg.Merge == nil {
		cfg.Merge = DefaultMerge()
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	m, err := newSyncMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Syncer{cfg: cfg, log: cfg.Logger.Named("metadata-sync"), metrics: m, trigger: make(chan struct{}, 1)}, nil
}

// Start runs the loop on a goroutine: a round at once, then one every
// Interval and one after each Trigger. It fails with ErrClosed after Close
// and if already started.
func (s *Syncer) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return meta.ErrClosed
	}
	if s.started {
		return errors.New("metadata: syncer already started")
	}
	s.started = true
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		pprof.Do(ctx, pprof.Labels("component", "metadata-syncer"), s.run)
	}()
	return nil
}

// Trigger asks for a round as soon as possible (for example right after
// the slave connects to its master). It never blocks; triggers made while
// one is pending coalesce.
func (s *Syncer) Trigger() {
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// Close stops the loop and waits for it, ending a round in progress
// through its context. It is idempotent.
func (s *Syncer) Close() error {
	s.mu.Lock()
	s.closed = true
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
	return nil
}

// Status returns the syncer's health.
func (s *Syncer) Status() SyncStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

func (s *Syncer) run(ctx context.Context) {
	t := s.cfg.Clock.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-s.trigger:
		}
	}
}

// SyncOnce runs one round now, outside the loop's schedule, and returns
// its result (also counted in Status and the metrics).
func (s *Syncer) SyncOnce(ctx context.Context) SyncResult {
	return s.round(ctx)
}

func (s *Syncer) round(ctx context.Context) SyncResult {
	s.roundMu.Lock()
	defer s.roundMu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	res := s.sync(rctx)
	cancel()
	if res.Err != nil && ctx.Err() != nil {
		return res // shutting down: not a failure of the master
	}
	s.record(res)
	if s.cfg.AfterRound != nil {
		s.cfg.AfterRound(res)
	}
	return res
}

func (s *Syncer) record(res SyncResult) {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status.Rounds++
	s.status.LastError = res.Err
	s.metrics.bytes.Add(float64(res.Bytes))
	if res.Err != nil {
		s.status.Failures++
		s.status.Healthy = false
		s.metrics.failures.Inc()
		if s.state != stateFailing {
			s.log.Warn("metadata sync failing; keeping the last good copy and retrying every interval", "interval", s.cfg.Interval, "error", res.Err)
		} else {
			s.log.Debug("metadata sync still failing", "error", res.Err)
		}
		s.state = stateFailing
		return
	}
	s.status.Healthy = true
	s.status.LastSuccess = now
	s.metrics.applied.Add(float64(len(res.Applied)))
	s.metrics.deleted.Add(float64(len(res.Deleted)))
	s.metrics.lastSync.Set(float64(now.UnixNano()) / 1e9)
	switch s.state {
	case stateFailing:
		s.log.Info("metadata sync recovered", "applied", len(res.Applied))
	case stateStarting:
		s.log.Info("metadata sync healthy", "applied", len(res.Applied))
	}
	if len(res.Applied) > 0 {
		s.log.Debug("metadata documents applied", "documents", res.Applied, "bytes", res.Bytes)
	}
	if len(res.Deleted) > 0 {
		s.log.Info("metadata documents deleted: the master no longer has them", "documents", res.Deleted)
	}
	s.state = stateHealthy
}

// sync is one round: list both sides, fetch what differs, merge, apply.
func (s *Syncer) sync(ctx context.Context) SyncResult {
	var res SyncResult
	remote, err := s.cfg.Master.List(ctx)
	if err != nil {
		res.Err = fmt.Errorf("metadata: list master: %w", err)
		return res
	}
	localList, err := s.cfg.Local.List(ctx)
	if err != nil {
		res.Err = fmt.Errorf("metadata: list local: %w", err)
		return res
	}
	local := make(map[string]meta.DataVersion, len(localList))
	for _, e := range localList {
		local[e.Name] = e.Version
	}
	var docs []meta.Document
	for _, e := range remote {
		if v, ok := local[e.Name]; ok && v.Equal(e.Version) {
			continue
		}
		doc, err := s.cfg.Master.Get(ctx, e.Name)
		if errors.Is(err, meta.ErrNotFound) {
			continue // gone between list and get; the next round sees
		}
		if err != nil {
			res.Err = fmt.Errorf("metadata: get %s from master: %w", e.Name, err)
			return res
		}
		res.Bytes += int64(len(doc.Body))
		doc.Name = e.Name
		if merge, ok := s.cfg.Merge[e.Name]; ok {
			var localBody []byte
			if _, had := local[e.Name]; had {
				ld, err := s.cfg.Local.Get(ctx, e.Name)
				if err != nil && !errors.Is(err, meta.ErrNotFound) {
					res.Err = fmt.Errorf("metadata: get local %s: %w", e.Name, err)
					return res
				}
				localBody = ld.Body
			}
			body, err := merge(localBody, doc.Body)
			if err != nil {
				res.Err = fmt.Errorf("metadata: merge %s: %w", e.Name, err)
				return res
			}
			doc.Body = body
		}
		docs = append(docs, doc)
	}
	// Deletions first: the local store limits then count what the master
	// has, not the union of both.
	if del, ok := s.cfg.Local.(meta.Deleter); ok {
		onMaster := make(map[string]bool, len(remote))
		for _, e := range remote {
			onMaster[e.Name] = true
		}
		for _, e := range localList {
			if onMaster[e.Name] {
				continue
			}
			err := del.Delete(ctx, e.Name)
			if err != nil && !errors.Is(err, meta.ErrNotFound) {
				res.Err = fmt.Errorf("metadata: delete local %s: %w", e.Name, err)
				return res
			}
			res.Deleted = append(res.Deleted, e.Name)
		}
	}
	if err := s.cfg.Local.Apply(ctx, docs); err != nil {
		res.Err = fmt.Errorf("metadata: apply locally: %w", err)
		return res
	}
	for _, d := range docs {
		res.Applied = append(res.Applied, d.Name)
	}
	return res
}
