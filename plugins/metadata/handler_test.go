package metadata

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/replicatorhq/replicator/sdk/meta"
)

func newTestHandler(t *testing.T, readOnly bool, maxSize int64) (http.Handler, *Store, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := Open(dir, Options{Clock: newFakeClock(), CreateDefaults: true, MaxDocumentSize: maxSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h, err := NewHandler(HandlerConfig{Store: st, ReadOnly: readOnly, MaxDocumentSize: maxSize, Logger: newTestLogger(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	return h, st, dir
}

func serve(h http.Handler, method, target string, body io.Reader) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, body)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestPluginHTTPPutGetList(t *testing.T) {
	t.Parallel()
	h, _, _ := newTestHandler(t, false, 0)
	rec := serve(h, "PUT", "/v1/metadata/topics.json", strings.NewReader(`{"topicConfigTable":{"T":{"perm":6}}}`))
	if rec.Code != 200 {
		t.Fatalf("PUT = %d %s", rec.Code, rec.Body)
	}
	var pr PutResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &pr); err != nil || pr.Name != TopicsName || pr.Version.Counter != 1 {
		t.Fatalf("PUT answer %s", rec.Body)
	}
	rec = serve(h, "PUT", "/v1/metadata/my%20doc", strings.NewReader(`{"a":1}`))
	if rec.Code != 200 {
		t.Fatalf("PUT escaped name = %d %s", rec.Code, rec.Body)
	}

	rec = serve(h, "GET", "/v1/metadata/topics.json", nil)
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET = %d %s", rec.Code, rec.Body)
	}
	v, body, err := DecodeDocument(rec.Body.Bytes())
	if err != nil || v != pr.Version || string(body) != `{"topicConfigTable":{"T":{"perm":6}}}` {
		t.Fatalf("GET body %s", rec.Body)
	}
	if !strings.HasPrefix(rec.Body.String(), `{"dataVersion":{"stateVersion":0,"timestamp":`) {
		t.Fatalf("GET not in file form: %s", rec.Body)
	}

	rec = serve(h, "GET", "/v1/metadata", nil)
	var lr ListResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &lr); err != nil || rec.Code != 200 {
		t.Fatalf("list = %d %s", rec.Code, rec.Body)
	}
	// consumerOffset.json, delayOffset.json, my doc, subscriptionGroup.json, topics.json
	if len(lr.Documents) != 5 || lr.Documents[2].Name != "my doc" || lr.Documents[4] != (meta.Entry{Name: TopicsName, Version: pr.Version}) {
		t.Fatalf("list = %+v", lr.Documents)
	}
	if rec := serve(h, "GET", "/v1/metadata/absent.json", nil); rec.Code != 404 || !strings.Contains(rec.Body.String(), `"error":`) {
		t.Fatalf("GET absent = %d %s", rec.Code, rec.Body)
	}
	if rec := serve(h, "POST", "/v1/metadata/topics.json", strings.NewReader(`{}`)); rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST = %d", rec.Code)
	}
}

// TestPluginHTTPBadInput: every bad request gets a 4xx with a JSON error
// and leaves the directory exactly as it was.
func TestPluginHTTPBadInput(t *testing.T) {
	t.Parallel()
	const limit = 1024
	cases := []struct {
		name     string
		method   string
		target   string
		body     string
		chunked  bool
		readOnly bool
		want     int
		wantMsg  string
	}{
		{"slash in name", "PUT", "/v1/metadata/a/b", `{}`, false, false, 400, "path separator"},
		{"encoded slash", "PUT", "/v1/metadata/a%2Fb", `{}`, false, false, 400, "path separator"},
		{"backslash", "PUT", "/v1/metadata/a%5Cb", `{}`, false, false, 400, "path separator"},
		{"dot dot", "PUT", "/v1/metadata/..", `{}`, false, false, 400, `".."`},
		{"encoded dot dot", "PUT", "/v1/metadata/%2E%2E", `{}`, false, false, 400, `".."`},
		{"traversal", "PUT", "/v1/metadata/..%2F..%2Fetc%2Fpasswd", `{}`, false, false, 400, "invalid document name"},
		{"dot dot inside", "PUT", "/v1/metadata/a..json", `{}`, false, false, 400, `".."`},
		{"NUL", "PUT", "/v1/metadata/a%00b", `{}`, false, false, 400, "control character"},
		{"newline", "PUT", "/v1/metadata/a%0Ab", `{}`, false, false, 400, "control character"},
		{"DEL", "PUT", "/v1/metadata/a%7Fb", `{}`, false, false, 400, "control character"},
		{"not UTF-8", "PUT", "/v1/metadata/%FF", `{}`, false, false, 400, "UTF-8"},
		{"empty name", "PUT", "/v1/metadata/", `{}`, false, false, 400, "empty"},
		{"256-byte name", "PUT", "/v1/metadata/" + strings.Repeat("n", 256), `{}`, false, false, 400, "over the limit"},
		{"252-byte name", "PUT", "/v1/metadata/" + strings.Repeat("n", 252), `{}`, false, false, 400, "over the limit"},
		{"hidden name", "PUT", "/v1/metadata/.journal", `{}`, false, false, 400, `starts with "."`},
		{"reserved suffix", "PUT", "/v1/metadata/topics.json.bak", `{}`, false, false, 400, "reserved"},
		{"GET bad name", "GET", "/v1/metadata/a%2Fb", ``, false, false, 400, "path separator"},
		{"body not JSON", "PUT", "/v1/metadata/topics.json", `topicConfigTable=1`, false, false, 400, "not valid JSON"},
		{"empty body", "PUT", "/v1/metadata/topics.json", ``, false, false, 400, "not valid JSON"},
		{"torn JSON", "PUT", "/v1/metadata/topics.json", `{"topicConfigTable":{`, false, false, 400, "not valid JSON"},
		{"JSON array", "PUT", "/v1/metadata/topics.json", `[1,2]`, false, false, 400, "not a JSON object"},
		{"JSON string", "PUT", "/v1/metadata/topics.json", `"x"`, false, false, 400, "not a JSON object"},
		{"fastjson bare keys", "PUT", "/v1/metadata/topics.json", `{0:1}`, false, false, 400, "not valid JSON"},
		{"bad dataVersion", "PUT", "/v1/metadata/topics.json", `{"dataVersion":"x"}`, false, false, 400, "dataVersion"},
		{"too large", "PUT", "/v1/metadata/topics.json", `{"x":"` + strings.Repeat("a", limit) + `"}`, false, false, 413, "too large"},
		{"too large chunked", "PUT", "/v1/metadata/topics.json", `{"x":"` + strings.Repeat("a", limit) + `"}`, true, false, 413, "too large"},
		{"slave read-only", "PUT", "/v1/metadata/topics.json", `{}`, false, true, 403, "read-only"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h, _, dir := newTestHandler(t, c.readOnly, limit)
			before := dirSnapshot(t, dir)
			var body io.Reader = strings.NewReader(c.body)
			if c.chunked {
				body = io.MultiReader(body) // hides the length: no Content-Length
			}
			req := httptest.NewRequest(c.method, "/", body)
			u, err := url.ParseRequestURI(c.target) // keeps ".." as sent
			if err != nil {
				t.Fatal(err)
			}
			req.URL, req.RequestURI = u, c.target
			if c.chunked {
				req.ContentLength = -1
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != c.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.want, rec.Body)
			}
			var er ErrorResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &er); err != nil || !strings.Contains(er.Error, c.wantMsg) {
				t.Fatalf("answer %q, want a JSON error containing %q", rec.Body, c.wantMsg)
			}
			if rec.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("Content-Type %q", rec.Header().Get("Content-Type"))
			}
			if after := dirSnapshot(t, dir); !sameSnapshot(before, after) {
				t.Fatalf("disk changed: %v -> %v", names(before), names(after))
			}
		})
	}
}

// The same checks through a real server and client: the path arrives as
// the client sent it.
func TestPluginHTTPBadInputOverTCP(t *testing.T) {
	t.Parallel()
	h, st, dir := newTestHandler(t, false, 1024)
	srv := httptest.NewServer(h)
	defer srv.Close()
	before := dirSnapshot(t, dir)
	for _, target := range []string{"/v1/metadata/a%2Fb", "/v1/metadata/..%2Fx", "/v1/metadata/a%00", "/v1/metadata/%2E%2E"} {
		req, _ := http.NewRequest("PUT", srv.URL+target, strings.NewReader(`{}`))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(data), `"error"`) {
			t.Errorf("PUT %s = %d %s", target, resp.StatusCode, data)
		}
	}
	req, _ := http.NewRequest("PUT", srv.URL+"/v1/metadata/big.json", strings.NewReader(`{"x":"`+strings.Repeat("a", 4096)+`"}`))
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Errorf("big PUT = %d", resp.StatusCode)
	}
	if after := dirSnapshot(t, dir); !sameSnapshot(before, after) {
		t.Fatalf("disk changed: %v -> %v", names(before), names(after))
	}
	if _, err := st.Get(context.Background(), "big.json"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatal("big document stored")
	}
}

func TestPluginHTTPReadOnlyServesReads(t *testing.T) {
	t.Parallel()
	h, _, _ := newTestHandler(t, true, 0)
	if rec := serve(h, "GET", "/v1/metadata/topics.json", nil); rec.Code != 200 {
		t.Fatalf("GET on a slave = %d", rec.Code)
	}
	if rec := serve(h, "GET", "/v1/metadata", nil); rec.Code != 200 {
		t.Fatalf("list on a slave = %d", rec.Code)
	}
	if _, err := NewHandler(HandlerConfig{}); err == nil {
		t.Fatal("NewHandler without a store succeeded")
	}
}
