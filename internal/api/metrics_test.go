package api

import (
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Two servers on one registry both start, and the requests of both are in
// the shared series: the registry loses no count (promreg's policy).
func TestTwoServersShareOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, _ := newTestServer(t, newFake(), func(c *Config) { c.Registerer, c.Gatherer = reg, reg })
	b, _ := newTestServer(t, newFake(), func(c *Config) { c.Registerer, c.Gatherer = reg, reg })
	for range 2 {
		do(t, a, http.MethodGet, "/v1/status", nil, nil)
	}
	for range 3 {
		do(t, b, http.MethodGet, "/v1/status", nil, nil)
	}
	do(t, b, http.MethodGet, "/v1/%2e%2e/x", nil, nil) // a path that is not clean: rejected
	want := `
# HELP replicator_http_requests_total HTTP API requests by route and status code.
# TYPE replicator_http_requests_total counter
replicator_http_requests_total{code="200",route="status"} 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "replicator_http_requests_total"); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(a.rejected); got != 1 || a.rejected != b.rejected {
		t.Fatalf("rejected paths: %v (shared %v), want 1 in one series", got, a.rejected == b.rejected)
	}
	if a.stream.met.messages != b.stream.met.messages {
		t.Fatal("the stream metrics of the second server are not the registered ones")
	}
	// The connection limiter of a second listener shares its series too.
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lln, err := LimitListenerPerIP(ln, 4, 2, nil, reg)
		if err != nil {
			t.Fatalf("second limited listener on one registry: %v", err)
		}
		lln.Close()
	}
}
