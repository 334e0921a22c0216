package api

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// discardWriter is an http.ResponseWriter that keeps only the status.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

// BenchmarkRoute measures the API handler (path checks, routing, metrics,
// the handler) without a network: "put" a 1 KiB JSON put against a backend
// that answers at once, "status" GET /v1/status, "not_allowed" a GET on
// the put route (405) and "not_found" an unknown path (404). Compare builds
// in the same run (benchstat or the ratio of ns/op).
func BenchmarkRoute(b *testing.B) {
	reg := prometheus.NewRegistry()
	s, err := New(Config{Backend: &countBackend{fakeBackend: newFake()}, Registerer: reg, Gatherer: reg})
	if err != nil {
		b.Fatal(err)
	}
	body := bytes.Repeat([]byte("x"), 1024)
	for _, c := range []struct {
		name, method, path string
		body               []byte
		code               int
	}{
		{"put", http.MethodPost, "/v1/topics/TopicTest/messages?queue=1", body, http.StatusOK},
		{"status", http.MethodGet, "/v1/status", nil, http.StatusOK},
		{"not_allowed", http.MethodGet, "/v1/topics/TopicTest/messages", nil, http.StatusMethodNotAllowed},
		{"not_found", http.MethodGet, "/v1/nothing", nil, http.StatusNotFound},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := httptest.NewRequest(c.method, c.path, nil)
			r.RemoteAddr = "127.0.0.1:5000"
			rd := bytes.NewReader(c.body)
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				rd.Reset(c.body)
				r.Body, r.ContentLength = io.NopCloser(rd), int64(len(c.body))
				clear(w.h)
				w.code = 0
				s.ServeHTTP(w, r)
				if w.code != c.code {
					b.Fatalf("%s %s: %d, want %d", c.method, c.path, w.code, c.code)
				}
			}
		})
	}
}
