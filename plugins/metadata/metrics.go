package metadata

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/internal/promreg"
)

// storeMetrics are the stores' metrics on one registry, registered as one
// prometheus.Collector under the host's one registration policy
// (internal/promreg): the first store on a registry registers the set and
// every further store takes it, so no store's figures are lost.
// replicator_metadata_refused_writes_total counts the refusals of every
// store; replicator_metadata_documents and replicator_metadata_stored_bytes
// are the sums over the stores open on the registry (a node runs one).
type storeMetrics struct {
	refused   *prometheus.CounterVec
	documents *prometheus.Desc
	bytes     *prometheus.Desc

	mu     sync.Mutex
	stores map[*Store]struct{} // open stores
}

func newStoreMetrics() *storeMetrics {
	return &storeMetrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "replicator_metadata_refused_writes_total",
			Help: "Metadata writes (PUT, a slave's apply) refused by the store limits, by reason: documents (--metadata-max-documents) or total_size (--metadata-max-total-size).",
		}, []string{"reason"}),
		documents: prometheus.NewDesc("replicator_metadata_documents", "Metadata documents in the store.", nil, nil),
		bytes:     prometheus.NewDesc("replicator_metadata_stored_bytes", "Sum of the metadata document bodies in the store, in bytes.", nil, nil),
		stores:    map[*Store]struct{}{},
	}
}

// Describe implements prometheus.Collector.
func (m *storeMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.refused.Describe(ch)
	ch <- m.documents
	ch <- m.bytes
}

// Collect implements prometheus.Collector.
func (m *storeMetrics) Collect(ch chan<- prometheus.Metric) {
	m.refused.Collect(ch)
	m.mu.Lock()
	stores := make([]*Store, 0, len(m.stores))
	for s := range m.stores {
		stores = append(stores, s)
	}
	m.mu.Unlock()
	var docs, total int64
	for _, s := range stores { // each store's lock alone: Close takes it before m.mu
		s.mu.Lock()
		docs += int64(len(s.docs))
		total += s.total
		s.mu.Unlock()
	}
	ch <- prometheus.MustNewConstMetric(m.documents, prometheus.GaugeValue, float64(docs))
	ch <- prometheus.MustNewConstMetric(m.bytes, prometheus.GaugeValue, float64(total))
}

func (m *storeMetrics) add(s *Store) {
	m.mu.Lock()
	m.stores[s] = struct{}{}
	m.mu.Unlock()
}

func (m *storeMetrics) remove(s *Store) {
	m.mu.Lock()
	delete(m.stores, s)
	m.mu.Unlock()
}

// registerMetrics registers the store's metrics on reg (nil: none), or
// takes the set already registered there; Open adds the store to the set
// once it is open, Close takes it out.
func (s *Store) registerMetrics(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	m, err := promreg.Register(reg, newStoreMetrics())
	if err != nil {
		return fmt.Errorf("metadata: register metrics: %w", err)
	}
	s.met, s.refused = m, m.refused
	return nil
}
