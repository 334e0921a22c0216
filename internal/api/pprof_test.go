package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestAPIProfiling: /debug/pprof/ is absent by default (a JSON 404); once
// enabled it serves the index and the named profiles, refuses other
// methods, and sits behind the bearer token like the other routes.
func TestAPIProfiling(t *testing.T) {
	s, _ := newTestServer(t, newFake(), nil)
	if a := do(t, s, "GET", "/debug/pprof/", nil, nil); a.code != http.StatusNotFound {
		t.Fatalf("profiling off: %d %s", a.code, a.body)
	}

	s, _ = newTestServer(t, newFake(), func(c *Config) { c.Token = "s3cret" })
	s.EnableProfiling()
	auth := map[string][]string{"Authorization": {"Bearer s3cret"}}
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/goroutine?debug=1"} {
		if a := do(t, s, "GET", p, nil, nil); a.code != http.StatusUnauthorized {
			t.Fatalf("GET %s without the token: %d", p, a.code)
		}
		a := do(t, s, "GET", p, nil, auth)
		if a.code != http.StatusOK || len(a.body) == 0 {
			t.Fatalf("GET %s: %d %q", p, a.code, a.body)
		}
	}
	if a := do(t, s, "GET", "/debug/pprof/", nil, auth); !strings.Contains(string(a.body), "goroutine") {
		t.Fatalf("index lists no profiles: %s", a.body)
	}
	if a := do(t, s, "GET", "/debug/pprof/cmdline", nil, auth); a.code != http.StatusOK {
		t.Fatalf("cmdline: %d", a.code)
	}
	if a := do(t, s, "DELETE", "/debug/pprof/", nil, auth); a.code != http.StatusMethodNotAllowed {
		t.Fatalf("DELETE: %d", a.code)
	}
	if n := testutil.ToFloat64(s.reqs.WithLabelValues("pprof", "200")); n < 5 {
		t.Fatalf("pprof requests counted %v", n)
	}
}
