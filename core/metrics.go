package core

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/internal/promreg"
)

// Metric names. Labels are bounded: slave is a connected slave's remote
// address and its series are deleted when the connection closes; status is
// one of the four PutStatus names; direction is "sent" or "received".
const (
	metricNamespace = "replicator"
	metricSubsystem = "ha"
)

// masterMetrics are the master's collectors. A nil *masterMetrics records
// nothing (no Registerer configured).
type masterMetrics struct {
	ackOffset  *prometheus.GaugeVec
	lag        *prometheus.GaugeVec
	sentBytes  prometheus.Counter
	sentFrames prometheus.Counter
	heartbeats prometheus.Counter
	conns      prometheus.Gauge
	connsTotal prometheus.Counter
	outOfRange prometheus.Counter
	closes     *prometheus.CounterVec
	syncWait   prometheus.Histogram
	lagWait    prometheus.Histogram
	puts       *prometheus.CounterVec
	syncSet    prometheus.Gauge
}

// slaveMetrics are the slave HA client's collectors; nil records nothing.
type slaveMetrics struct {
	recvBytes  prometheus.Counter
	recvFrames prometheus.Counter
	heartbeats prometheus.Counter
	reports    prometheus.Counter
	connected  prometheus.Gauge
	reconnects prometheus.Counter
	mismatches prometheus.Counter
	// autoswitch and hardening
	truncated    prometheus.Counter
	noConsistent prometheus.Counter
	diverged     prometheus.Counter
	hbOnly       prometheus.Gauge
}

// waitHistogram is a histogram of put waits for slave acks, 50 µs to ~6.5 s.
func waitHistogram(name, help string) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metricNamespace, Subsystem: metricSubsystem,
		Name: name, Help: help,
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18),
	})
}

func heartbeatsVec() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNamespace, Subsystem: metricSubsystem,
		Name: "heartbeats_total",
		Help: "Heartbeat frames ([next offset][0]) sent by masters or received by slaves.",
	}, []string{"direction"})
}

// regInto registers c on r and stores it (or the collector already
// registered in its place) in *dst; the first error sticks in *err.
func regInto[C prometheus.Collector](r prometheus.Registerer, dst *C, c C, err *error) {
	if *err != nil {
		return
	}
	*dst, *err = promreg.Register(r, c)
}

func opts(name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: metricNamespace, Subsystem: metricSubsystem, Name: name, Help: help}
}

func newMasterMetrics(r prometheus.Registerer) (*masterMetrics, error) {
	if r == nil {
		return nil, nil
	}
	var (
		m   masterMetrics
		err error
		hb  *prometheus.CounterVec
	)
	regInto(r, &m.ackOffset, prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("slave_ack_offset_bytes", "Last offset acknowledged by each connected slave.")), []string{"slave"}), &err)
	regInto(r, &m.lag, prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("slave_lag_bytes", "Master max offset minus the slave's ack offset, at the slave's last report.")), []string{"slave"}), &err)
	regInto(r, &m.sentBytes, prometheus.NewCounter(prometheus.CounterOpts(opts("sent_bytes_total", "Commit-log body bytes sent to slaves."))), &err)
	regInto(r, &m.sentFrames, prometheus.NewCounter(prometheus.CounterOpts(opts("sent_frames_total", "Data frames sent to slaves."))), &err)
	regInto(r, &m.conns, prometheus.NewGauge(prometheus.GaugeOpts(opts("connections", "Slave connections currently open."))), &err)
	regInto(r, &m.connsTotal, prometheus.NewCounter(prometheus.CounterOpts(opts("connections_total", "Slave connections accepted."))), &err)
	regInto(r, &m.outOfRange, prometheus.NewCounter(prometheus.CounterOpts(opts("out_of_range_requests_total", "Slave connections whose request offset was outside the master's log (heartbeats only)."))), &err)
	regInto(r, &m.closes, prometheus.NewCounterVec(prometheus.CounterOpts(opts("connection_closes_total", "Slave connections closed, by reason.")), []string{"reason"}), &err)
	regInto(r, &m.syncWait, waitHistogram("sync_wait_duration_seconds", "Time SYNC_MASTER puts waited for slave acks."), &err)
	regInto(r, &m.lagWait, waitHistogram("lag_wait_duration_seconds", "Time ASYNC_MASTER puts waited for the slave to come within MaxLag bytes (back-pressure; only puts that waited)."), &err)
	regInto(r, &m.puts, prometheus.NewCounterVec(prometheus.CounterOpts(opts("puts_total", "Stored puts by status.")), []string{"status"}), &err)
	regInto(r, &m.syncSet, prometheus.NewGauge(prometheus.GaugeOpts(opts("sync_state_set_members", "Members of the master's in-sync set (autoswitch), the master included."))), &err)
	regInto(r, &hb, heartbeatsVec(), &err)
	if err != nil {
		return nil, err
	}
	m.heartbeats = hb.WithLabelValues("sent")
	return &m, nil
}

// truncatedCounter is replicator_ha_truncated_bytes_total, shared by the
// slave's handshake truncation and Replica.BecomeMaster's partial-record
// cut.
func truncatedCounter() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts(opts("truncated_bytes_total", truncatedHelp)))
}

const truncatedHelp = "Commit-log bytes cut (autoswitch): by a slave at a handshake to reach the consistent point with its master, " +
	"or by a replica becoming master from a log that ended inside a record."

// newTruncatedCounter registers truncatedCounter on r (or returns the one
// registered); nil without a Registerer.
func newTruncatedCounter(r prometheus.Registerer) (prometheus.Counter, error) {
	if r == nil {
		return nil, nil
	}
	var (
		c   prometheus.Counter
		err error
	)
	regInto(r, &c, truncatedCounter(), &err)
	return c, err
}

func newSlaveMetrics(r prometheus.Registerer) (*slaveMetrics, error) {
	if r == nil {
		return nil, nil
	}
	var (
		m   slaveMetrics
		err error
		hb  *prometheus.CounterVec
	)
	regInto(r, &m.recvBytes, prometheus.NewCounter(prometheus.CounterOpts(opts("received_bytes_total", "Commit-log body bytes received from the master and appended."))), &err)
	regInto(r, &m.recvFrames, prometheus.NewCounter(prometheus.CounterOpts(opts("received_frames_total", "Data frames received from the master and appended."))), &err)
	regInto(r, &m.reports, prometheus.NewCounter(prometheus.CounterOpts(opts("reports_total", "Offset reports (acks) sent to the master."))), &err)
	regInto(r, &m.connected, prometheus.NewGauge(prometheus.GaugeOpts(opts("client_connected", "1 while the slave is connected to its master."))), &err)
	regInto(r, &m.reconnects, prometheus.NewCounter(prometheus.CounterOpts(opts("client_reconnects_total", "Slave connection attempts after the first."))), &err)
	regInto(r, &m.mismatches, prometheus.NewCounter(prometheus.CounterOpts(opts("offset_mismatches_total", "Frames whose offset differed from the slave's max offset (connection dropped)."))), &err)
	regInto(r, &m.truncated, truncatedCounter(), &err)
	regInto(r, &m.noConsistent, prometheus.NewCounter(prometheus.CounterOpts(opts("no_consistent_point_total", "Handshakes refused by the slave: no consistent point with the master, or a log without epoch history (autoswitch)."))), &err)
	regInto(r, &m.diverged, prometheus.NewCounter(prometheus.CounterOpts(opts("diverged_log_total", "Classic sessions dropped by the slave: the master's bytes at its max offset are not a record."))), &err)
	regInto(r, &m.hbOnly, prometheus.NewGauge(prometheus.GaugeOpts(opts("client_heartbeats_only", "1 while the master sends this slave heartbeats only although it holds more data: the slave's offset is outside the master's log (autoswitch)."))), &err)
	regInto(r, &hb, heartbeatsVec(), &err)
	if err != nil {
		return nil, err
	}
	m.heartbeats = hb.WithLabelValues("received")
	return &m, nil
}
