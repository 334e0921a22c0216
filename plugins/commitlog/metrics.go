package commitlog

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	reg           prometheus.Registerer
	collectors    []prometheus.Collector
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
	m.collectors = []prometheus.Collector{m.appendedBytes, m.appended, m.flushes, m.flushDuration, m.flushTimeouts,
		m.segments, m.maxOffset, m.flushedOffset, m.truncations, m.retained}
	if reg == nil {
		return m, nil
	}
	for i, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range m.collectors[:i] {
				reg.Unregister(done)
			}
			return nil, err
		}
	}
	m.reg = reg
	return m, nil
}

func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
	m.reg = nil
}
