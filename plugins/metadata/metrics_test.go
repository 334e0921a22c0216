package metadata

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Two stores on one registry both open, and the figures of both are in the
// shared series: refusals sum, the gauges are the sums over the open stores,
// and a closed store leaves them.
func TestTwoStoresShareOneRegistry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := prometheus.NewPedanticRegistry()
	open := func() *Store {
		st, err := Open(t.TempDir(), Options{Clock: newFakeClock(), Logger: newTestLogger(t, nil), MaxDocuments: 1, Registerer: reg})
		if err != nil {
			t.Fatalf("store on a shared registry: %v", err)
		}
		return st
	}
	a, b := open(), open()
	defer a.Close()
	if _, err := a.Put(ctx, "x", json.RawMessage(`{"a":1}`)); err != nil { // 7 bytes
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "y", json.RawMessage(`{"bb":22}`)); err != nil { // 9 bytes
		t.Fatal(err)
	}
	for _, st := range []*Store{a, b} {
		if _, err := st.Put(ctx, "z", json.RawMessage(`{}`)); !errors.Is(err, ErrLimit) {
			t.Fatalf("second document: %v, want ErrLimit", err)
		}
	}
	want := `
# HELP replicator_metadata_documents Metadata documents in the store.
# TYPE replicator_metadata_documents gauge
replicator_metadata_documents 2
# HELP replicator_metadata_refused_writes_total Metadata writes (PUT, a slave's apply) refused by the store limits, by reason: documents (--metadata-max-documents) or total_size (--metadata-max-total-size).
# TYPE replicator_metadata_refused_writes_total counter
replicator_metadata_refused_writes_total{reason="documents"} 2
# HELP replicator_metadata_stored_bytes Sum of the metadata document bodies in the store, in bytes.
# TYPE replicator_metadata_stored_bytes gauge
replicator_metadata_stored_bytes 16
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	want = strings.NewReplacer("documents 2", "documents 1", "stored_bytes 16", "stored_bytes 7").Replace(want)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatalf("after closing one store: %v", err)
	}
}
