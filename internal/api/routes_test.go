package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRouting pins the answers of the ServeMux patterns: the method a
// route takes (GET also HEAD), 405 with Allow and a JSON error for the
// others, counted under the route's label, 404 (route "other") for a path
// no pattern has, the trailing-slash redirect whatever the method, and
// routes that extensions mount with or without a method; with a token, the
// token is checked before the method (401), except on the open routes.
func TestRouting(t *testing.T) {
	for _, token := range []string{"", "s3cret"} {
		s, err := New(Config{Backend: newFake(), Token: token})
		if err != nil {
			t.Fatal(err)
		}
		s.SetReady(true)
		s.EnableProfiling()
		s.Handle("/v1/ext/", "ext", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			WriteJSON(w, http.StatusOK, map[string]string{"method": r.Method})
		}))
		s.HandleFunc("PUT /v1/ext2/{name}", "ext2", func(w http.ResponseWriter, r *http.Request) {
			WriteJSON(w, http.StatusOK, map[string]string{"name": r.PathValue("name")})
		})
		for _, c := range []struct {
			method, path string
			auth         bool // send the token (when there is one)
			code         int
			allow        string
			text         string // in the JSON error, or the body
			route        string // the metrics label counted
		}{
			{"GET", "/v1/topics/T/messages", true, 405, "POST", "method GET not allowed (use POST)", "put"},
			{"HEAD", "/v1/topics/T/messages", true, 405, "POST", "", "put"},
			{"DELETE", "/v1/status", true, 405, "GET", "method DELETE not allowed (use GET)", "status"},
			{"HEAD", "/v1/status", true, 200, "", "", "status"},
			{"PUT", "/v1/role", true, 405, "POST", "method PUT not allowed (use POST)", "role"},
			{"POST", "/v1/messages", true, 405, "GET", "(use GET)", "messages"},
			{"POST", "/metrics", true, 405, "GET", "(use GET)", "metrics"},
			{"GET", "/nope", true, 404, "", "no such endpoint: /nope", "other"},
			{"GET", "/v1/status/extra", true, 404, "", "no such endpoint: /v1/status/extra", "other"},
			{"DELETE", "/debug/pprof/symbol", true, 405, "GET, POST", "method DELETE not allowed (use GET, POST)", "pprof"},
			{"DELETE", "/debug/pprof/cmdline", true, 405, "GET", "(use GET)", "pprof"},
			{"DELETE", "/debug/pprof/heap", true, 405, "GET", "(use GET)", "pprof"},
			{"GET", "/debug/pprof", true, 307, "", "/debug/pprof/", ""},
			{"DELETE", "/debug/pprof", true, 307, "", "/debug/pprof/", ""},
			{"DELETE", "/v1/ext/a", true, 200, "", `"method":"DELETE"`, "ext"},
			{"PUT", "/v1/ext2/n1", true, 200, "", `"name":"n1"`, "ext2"},
			{"GET", "/v1/ext2/n1", true, 405, "PUT", "(use PUT)", "ext2"},
			{"DELETE", "/healthz", false, 405, "GET", "(use GET)", "healthz"},
			{"GET", "/readyz", false, 200, "", "ready", "readyz"},
		} {
			req := httptest.NewRequest(c.method, c.path, nil)
			if token != "" && c.auth {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			before := 0.0
			if c.route != "" {
				before = testutil.ToFloat64(s.reqs.WithLabelValues(c.route, fmt.Sprint(c.code)))
			}
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			what := fmt.Sprintf("token %q: %s %s", token, c.method, c.path)
			if rec.Code != c.code || rec.Header().Get("Allow") != c.allow {
				t.Fatalf("%s: %d Allow %q (%s), want %d Allow %q", what, rec.Code, rec.Header().Get("Allow"), rec.Body, c.code, c.allow)
			}
			switch {
			case c.code == 307:
				if rec.Header().Get("Location") != c.text {
					t.Fatalf("%s: Location %q, want %q", what, rec.Header().Get("Location"), c.text)
				}
			case c.code >= 400 && c.method != "HEAD":
				var ea ErrorAnswer
				if err := json.Unmarshal(rec.Body.Bytes(), &ea); err != nil || !strings.Contains(ea.Error, c.text) {
					t.Fatalf("%s: body %s, want an error saying %q", what, rec.Body, c.text)
				}
			case c.method != "HEAD":
				if !strings.Contains(rec.Body.String(), c.text) {
					t.Fatalf("%s: body %s, want %q", what, rec.Body, c.text)
				}
			}
			if c.route != "" {
				if got := testutil.ToFloat64(s.reqs.WithLabelValues(c.route, fmt.Sprint(c.code))); got != before+1 {
					t.Fatalf("%s: requests_total{route=%q,code=\"%d\"} went from %v to %v", what, c.route, c.code, before, got)
				}
			}
		}
		if token == "" {
			continue
		}
		// Without the token: 401 before the method or the path is looked
		// at, counted under the route the request would reach.
		for _, c := range []struct{ method, path, route string }{
			{"DELETE", "/v1/status", "status"},
			{"GET", "/v1/topics/T/messages", "put"},
			{"POST", "/v1/topics/T/messages", "put"},
			{"GET", "/nope", "other"},
			{"DELETE", "/v1/ext/a", "ext"},
		} {
			before := testutil.ToFloat64(s.reqs.WithLabelValues(c.route, "401"))
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
			if rec.Code != http.StatusUnauthorized || rec.Header().Get("Allow") != "" {
				t.Fatalf("no token: %s %s: %d Allow %q %s", c.method, c.path, rec.Code, rec.Header().Get("Allow"), rec.Body)
			}
			if got := testutil.ToFloat64(s.reqs.WithLabelValues(c.route, "401")); got != before+1 {
				t.Fatalf("no token: %s %s: requests_total{route=%q,code=\"401\"} %v -> %v", c.method, c.path, c.route, before, got)
			}
		}
	}
}
