package commitlog

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/internal/promreg"
)

// metrics are a log's collectors, registered as one prometheus.Collector
// under the host's one registration policy (internal/promreg): the first
// log on a registry registers its set, and every further log on that
// registry takes the registered set instead of failing. The counters and
// the flush histogram then hold the sum of the logs; a gauge (segments,
// max and flushed offset) shows the log that set it last, so a process
// that runs several logs and wants each one's gauges gives each its own
// registry (or prometheus.WrapRegistererWith a label). The set leaves the
// registry when the last log using it closes.
type metrics struct {
	appendedBytes prometheus.Counter
	appended      prometheus.Counter
	flushes       prometheus.Counter
	flushDuration prometheus.Histogram
	flushTimeouts prometheus.Counter
	segments      prometheus.Gauge
	maxOffset     prometheus.Gauge
	flushedOffset prometheus.Gauge
	truncations   prometheus.Counter
	retained      prometheus.Counter

	mu    sync.Mutex
	reg   prometheus.Registerer // nil: not registered
	users int                   // open logs using this set
	gone  bool                  // unregistered by its last log
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "replicator", "commitlog"
	m := &metrics{
		appendedBytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "appended_bytes_total",
			Help: "Bytes appended to the commit log (records, fillers and replicated bytes)."}),
		appended: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "appended_records_total",
			Help: "Records appended by Append (master side)."}),
		flushes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "flushes_total",
			Help: "Flushes (msync rounds) that wrote something."}),
		flushDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "flush_duration_seconds",
			Help: "Duration of one flush (msync of the dirty range).", Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16)}),
		flushTimeouts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "flush_timeouts_total",
			Help: "Sync-mode appends that returned FLUSH_DISK_TIMEOUT."}),
		segments: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "segments",
			Help: "Segment files in the log."}),
		maxOffset: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "max_offset_bytes",
			Help: "Max offset of the log (first byte not yet written)."}),
		flushedOffset: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "flushed_offset_bytes",
			Help: "Every byte below this offset is durable."}),
		truncations: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "truncations_total",
			Help: "Truncations (Truncate calls and torn tails cut at recovery)."}),
		retained: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "retention_deleted_segments_total",
			Help: "Segments deleted by retention."}),
	}
	if reg == nil {
		return m, nil
	}
	for {
		shared, err := promreg.Register(reg, m)
		if err != nil {
			return nil, err
		}
		shared.mu.Lock()
		if !shared.gone {
			shared.reg = reg
			shared.users++
			shared.mu.Unlock()
			return shared, nil
		}
		// Its last log unregistered it meanwhile: register again.
		shared.mu.Unlock()
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.appendedBytes, m.appended, m.flushes, m.flushDuration, m.flushTimeouts,
		m.segments, m.maxOffset, m.flushedOffset, m.truncations, m.retained}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// unregister ends one log's use of the set; the last one takes it off the
// registry.
func (m *metrics) unregister() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reg == nil {
		return
	}
	if m.users--; m.users == 0 {
		m.reg.Unregister(m)
		m.reg, m.gone = nil, true
	}
}
