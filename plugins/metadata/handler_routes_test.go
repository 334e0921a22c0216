package metadata

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// oldMethods is the method table the handler routed with before it used
// one ServeMux pattern per method, kept here as the reference the patterns
// are compared against.
type oldMethods map[string]http.HandlerFunc

func (m oldMethods) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f, ok := m[r.Method]
	if !ok && r.Method == http.MethodHead {
		f, ok = m[http.MethodGet]
	}
	if ok {
		f(w, r)
		return
	}
	allow := make([]string, 0, len(m))
	for _, k := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		if _, ok := m[k]; ok {
			allow = append(allow, k)
		}
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, http.StatusMethodNotAllowed, fmt.Errorf("metadata: method %s not allowed (use %s)", r.Method, strings.Join(allow, ", ")))
}

// newOldHandler is NewHandler with the old method table.
func newOldHandler(t *testing.T, cfg HandlerConfig) http.Handler {
	t.Helper()
	hh, err := NewHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := hh.(*handler)
	h.mux = http.NewServeMux()
	h.mux.Handle(APIPath, oldMethods{http.MethodGet: h.list})
	h.mux.Handle(apiPrefix+"{name}", oldMethods{http.MethodGet: h.get, http.MethodPut: h.put, http.MethodDelete: h.delete})
	return h
}

// TestHandlerRoutesAsTheMethodTable sends every request of a table (each
// method on each kind of path, bodies valid, invalid and too large, on a
// master's and a slave's handler) to the ServeMux-pattern handler and to
// the old method table, each over its own store, and requires the same
// status, Allow and Content-Type headers and body for every one.
func TestHandlerRoutesAsTheMethodTable(t *testing.T) {
	t.Parallel()
	methods := []string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodPost,
		http.MethodPatch, http.MethodOptions, http.MethodTrace, "BREW"}
	paths := []string{"/v1/metadata", "/v1/metadata/", "/v1/metadata/topics.json", "/v1/metadata/new.json",
		"/v1/metadata/missing.json", "/v1/metadata/a/b", "/v1/metadata/..", "/v1/metadata/%2e%2e", "/v1/metadata/%25zz",
		"/v1/metadata/topics.json/", "/v1/metadata//x", "/v1/metadatax", "/v1", "/", "/other",
		"/v1/metadata?x=1", "/v1/metadata/new.json?y=2", "/v1/metadata/.hidden", "/v1/metadata/b%2Fc"}
	bodies := []string{`{"k":1}`, `not json`, `{"k":"` + strings.Repeat("x", 200) + `"}`}
	n := 0
	for _, readOnly := range []bool{false, true} {
		open := func() *Store {
			st, err := Open(t.TempDir(), Options{Clock: newFakeClock(), Logger: newTestLogger(t, nil), CreateDefaults: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}
		cfg := HandlerConfig{ReadOnly: readOnly, MaxDocumentSize: 128}
		cfg.Store = open()
		newH, err := NewHandler(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Store = open()
		oldH := newOldHandler(t, cfg)
		for _, m := range methods {
			for _, p := range paths {
				for _, b := range bodies {
					n++
					do := func(h http.Handler) *httptest.ResponseRecorder {
						req := httptest.NewRequest(m, p, strings.NewReader(b))
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, req)
						return rec
					}
					got, want := do(newH), do(oldH)
					for _, k := range []string{"Allow", "Content-Type", "Location"} {
						if got.Header().Get(k) != want.Header().Get(k) {
							t.Errorf("%s %s (read-only %v): %s %q, the method table gave %q", m, p, readOnly, k, got.Header().Get(k), want.Header().Get(k))
						}
					}
					if got.Code != want.Code || !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
						t.Errorf("%s %s %.10q (read-only %v): %d %s; the method table gave %d %s", m, p, b, readOnly, got.Code, got.Body, want.Code, want.Body)
					}
				}
			}
		}
	}
	t.Logf("%d requests compared", n)
}
