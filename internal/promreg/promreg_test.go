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

func TestIntoReplacesWithTheSharedCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "replicator_test_into_total", Help: "Into."}
	a, b := prometheus.NewCounter(opts), prometheus.NewCounter(opts)
	if err := Into(reg, &a); err != nil {
		t.Fatal(err)
	}
	first := a
	if err := Into(reg, &b); err != nil {
		t.Fatal(err)
	}
	if b != first {
		t.Fatal("the second Into did not hand back the registered counter")
	}
	a.Inc()
	b.Inc()
	if n, err := testutil.GatherAndCount(reg, "replicator_test_into_total"); err != nil || n != 1 {
		t.Fatalf("series: %d, %v", n, err)
	}
	if got := testutil.ToFloat64(first); got != 2 {
		t.Fatalf("shared counter = %v, want 2", got)
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "replicator_test_into_total", Help: "Into."})
	keep := g
	if err := Into(reg, &g); err == nil || g != keep {
		t.Fatalf("a gauge under a counter's name: err %v, dst changed %v", err, g != keep)
	}
}
