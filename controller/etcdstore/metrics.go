package etcdstore

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/controller"
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
	if reg == nil {
		return m, nil
	}
	var err error
	if m.conflicts, err = register(reg, m.conflicts); err != nil {
		return nil, err
	}
	if m.decisions, err = register(reg, m.decisions); err != nil {
		return nil, err
	}
	return m, nil
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
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
