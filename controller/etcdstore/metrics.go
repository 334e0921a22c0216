package etcdstore

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/controller"

	"github.com/replicatorhq/replicator/internal/promreg"
)

type metrics struct {
	conflicts prometheus.Counter
	decisions *prometheus.CounterVec
}

// newMetrics registers the store's metrics on reg (unregistered ones
// when reg is nil); collectors already registered by another Store on
// the same registerer are reused.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "replicator_controller_revision_conflicts_total",
			Help: "Group state writes that lost the revision race and were read and stepped again.",
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "replicator_controller_decisions_total",
			Help: "Group state changes written to etcd, by outcome (elected, unclean, no_master, set_accepted).",
		}, []string{"outcome"}),
	}
	if err := errors.Join(promreg.Into(reg, &m.conflicts), promreg.Into(reg, &m.decisions)); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) decided(d controller.Decision) {
	switch {
	case d.Outcome == controller.Elected && d.DataLoss:
		m.decisions.WithLabelValues("unclean").Inc()
	case d.Outcome == controller.Elected:
		m.decisions.WithLabelValues("elected").Inc()
	case d.Outcome == controller.NoMasterLeft:
		m.decisions.WithLabelValues("no_master").Inc()
	case d.Outcome == controller.SetAccepted:
		m.decisions.WithLabelValues("set_accepted").Inc()
	}
}
