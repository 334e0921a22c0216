package member

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/internal/promreg"
)

type metrics struct {
	role, fenced, epoch, registered prometheus.Gauge
	roleChanges, renewFailures      prometheus.Counter
	lost, heartbeatFailures         prometheus.Counter
	refused                         *prometheus.CounterVec
}

// newMetrics registers the member's metrics, labelled by group and
// broker id, on reg (unregistered ones when reg is nil); collectors
// already registered by another member are reused.
func newMetrics(reg prometheus.Registerer, group string, id int64) (*metrics, error) {
	labels := []string{"group", "broker_id"}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	vecs := []prometheus.Collector{
		gauge("replicator_controller_member_role", "Role of the member's replica: 0 none, 1 master, 2 slave."),
		gauge("replicator_controller_member_fenced", "1 while the member's master is fenced (lease not valid, no master or another master)."),
		gauge("replicator_controller_member_epoch", "Last epoch of the member's epoch file."),
		gauge("replicator_controller_member_registered", "1 while the member holds a registration lease."),
		counter("replicator_controller_member_role_changes_total", "Role changes of the member's replica."),
		counter("replicator_controller_member_lease_renew_failures_total", "Lease renewals that failed (etcd unreachable or slow)."),
		counter("replicator_controller_member_lease_lost_total", "Registrations that ended: lease not renewed in time, lost or replaced."),
		counter("replicator_controller_member_heartbeat_failures_total", "Epoch and max offset reports that failed."),
		prometheus.NewCounterVec(prometheus.CounterOpts{Name: "replicator_controller_member_puts_refused_total",
			Help: "Puts answered with an error because the lease was not valid, before the put or when it returned (when)."},
			append(labels, "when")),
	}
	if reg != nil {
		for i, c := range vecs {
			var err error
			if vecs[i], err = promreg.Register(reg, c); err != nil {
				return nil, err
			}
		}
	}
	lv := []string{group, strconv.FormatInt(id, 10)}
	g := func(i int) prometheus.Gauge { return vecs[i].(*prometheus.GaugeVec).WithLabelValues(lv...) }
	c := func(i int) prometheus.Counter { return vecs[i].(*prometheus.CounterVec).WithLabelValues(lv...) }
	return &metrics{role: g(0), fenced: g(1), epoch: g(2), registered: g(3), roleChanges: c(4), renewFailures: c(5),
		lost: c(6), heartbeatFailures: c(7), refused: vecs[8].(*prometheus.CounterVec).MustCurryWith(prometheus.Labels{"group": lv[0], "broker_id": lv[1]})}, nil
}
