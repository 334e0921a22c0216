package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRegisterReusesTheRegisteredCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "replicator_test_things_total", Help: "Things."}
	a, err := Register(reg, prometheus.NewCounter(opts))
	if err != nil {
		t.Fatal(err)
	}
	a.Inc()
	b, err := Register(reg, prometheus.NewCounter(opts))
	if err != nil {
		t.Fatal(err)
	}
	b.Inc()
	if got := testutil.ToFloat64(a); got != 2 {
		t.Fatalf("shared counter = %v, want 2 (the second registration must reuse the first)", got)
	}
	// The same name as another kind is refused.
	if _, err := Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "replicator_test_things_total", Help: "Things."})); err == nil {
		t.Fatal("a gauge under a counter's name was accepted")
	}
	// No registry: nothing registered, c returned.
	c := prometheus.NewCounter(opts)
	if got, err := Register[prometheus.Counter](nil, c); err != nil || got != c {
		t.Fatalf("nil registry: %v %v", got, err)
	}
}
