package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/replicatorhq/replicator/plugins/metadata"
)

// abuseServer is the API with the metadata plugin over a real data
// directory, served by HTTPServer on a real loopback listener.
type abuseServer struct {
	api   *Server
	fake  *fakeBackend
	addr  string
	data  string // the data directory (metadata in data/config)
	reg   *prometheus.Registry
	store *metadata.Store
	ln    net.Listener // the limited listener
}

func startAbuseServer(t *testing.T, token string, lim ServerLimits) *abuseServer {
	t.Helper()
	as := &abuseServer{fake: newFake(), data: t.TempDir(), reg: prometheus.NewRegistry()}
	var err error
	as.api, err = New(Config{Backend: as.fake, Registerer: as.reg, Gatherer: as.reg, MaxBodyBytes: 1024, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	as.store, err = metadata.Open(metadata.ConfigDir(as.data), metadata.Options{CreateDefaults: true, MaxDocumentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	h, err := metadata.NewHandler(metadata.HandlerConfig{Store: as.store, MaxDocumentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	as.api.Handle(metadata.APIPath, "metadata", h)
	as.api.Handle(metadata.APIPath+"/", "metadata", h)
	as.api.SetReady(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lln, err := LimitListenerPerIP(ln, lim.MaxConns, lim.MaxConnsPerIP, nil, as.reg)
	if err != nil {
		t.Fatal(err)
	}
	as.addr, as.ln = ln.Addr().String(), lln
	srv := as.api.HTTPServer(lim)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
		as.store.Close()
	})
	return as
}

// snapshot maps every file under dir to its size and SHA-256.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			m[p] = "dir"
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		m[p] = fmt.Sprintf("%d %x", len(b), sha256.Sum256(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sameTree(t *testing.T, before, after map[string]string) {
	t.Helper()
	var diff []string
	for k, v := range after {
		if before[k] != v {
			diff = append(diff, "changed or new: "+k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			diff = append(diff, "removed: "+k)
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		t.Fatalf("the data directory changed:\n%s", strings.Join(diff, "\n"))
	}
}

// raw sends a request exactly as written (no client-side path cleaning)
// and returns the status code and body.
func raw(t *testing.T, addr, req string) (int, []byte) {
	t.Helper()
	return rawResp(t, addr, req, nil)
}

// rawResp is raw that also hands the answer to look (when not nil).
func rawResp(t *testing.T, addr, req string, look func(*http.Response)) (int, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// Write while reading, as an HTTP client does: the server may answer
	// (413) and close before it has read the whole request, and then the
	// rest of the write fails with a reset. What matters is the answer.
	wrote := make(chan error, 1)
	go func() {
		_, err := io.WriteString(c, req)
		wrote <- err
	}()
	finish := sync.OnceValue(func() error { c.Close(); return <-wrote })
	defer finish()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer to %.200q: %v (write: %v)", req, err, finish())
	}
	defer resp.Body.Close()
	if look != nil {
		look(resp)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// wantJSONError checks a 4xx answer carrying {"error": "..."}.
func wantJSONError(t *testing.T, what string, code int, body []byte) {
	t.Helper()
	if code < 400 || code > 499 {
		t.Fatalf("%s: status %d, want 4xx (%s)", what, code, body)
	}
	var ea ErrorAnswer
	if err := json.Unmarshal(body, &ea); err != nil || ea.Error == "" {
		t.Fatalf("%s: %d answer is not a JSON error: %q", what, code, body)
	}
}

func TestAbusePathTricks(t *testing.T) {
	as := startAbuseServer(t, "", DefaultServerLimits(time.Second))
	before := snapshot(t, as.data)
	long := strings.Repeat("a", 5000)
	name300 := strings.Repeat("n", 300)
	body := `{"topicConfigTable":{}}`
	paths := []string{
		"/v1/metadata/../../../../etc/passwd",
		"/v1/metadata/..%2f..%2f..%2fetc%2fpasswd",
		"/v1/metadata/%2e%2e/%2e%2e/x.json",
		"/v1/metadata/%2E%2E",
		"/v1/metadata/..",
		"/v1/metadata/.",
		"/v1/metadata/./topics.json",
		"/v1/metadata//etc/passwd",
		"/v1/metadata/%2fetc%2fpasswd",
		"/v1/metadata/a%00b.json",
		"/v1/metadata/topics.json%00.bak",
		"/v1/metadata/..%5c..%5cwindows.ini",
		"/v1/metadata/a%5cb",
		"/v1/metadata/.hidden",
		"/v1/metadata/topics.json.tmp",
		"/v1/metadata/%ff%fe.json",
		"/v1/metadata/" + name300,
		"/v1/metadata/" + long,
		"/v1/metadata/%0d%0aInjected:%20header",
		"/v1/metadata/x%7f",
		"/v1/../v1/metadata/topics.json",
		"/v1/topics/%ff%fe/messages",
		"/v1/topics/T%00/messages",
		"/v1/topics/../../metadata/topics.json/messages",
	}
	for _, p := range paths {
		for _, method := range []string{"PUT", "POST", "GET", "DELETE"} {
			req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", method, p, len(body), body)
			code, b := raw(t, as.addr, req)
			short := p
			if len(short) > 80 {
				short = short[:80] + "..."
			}
			if method == "GET" && (code == 200 || code == 404) && strings.HasPrefix(p, "/v1/metadata/") && !strings.Contains(p, "%") && !strings.Contains(p, "..") && !strings.Contains(p, "/.") && !strings.Contains(p, "//") {
				continue // a valid but absent name may be a plain 404; checked below
			}
			wantJSONError(t, method+" "+short, code, b)
		}
	}
	// Absent but valid names: a JSON 404.
	code, b := raw(t, as.addr, "GET /v1/metadata/absent.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	wantJSONError(t, "GET absent", code, b)
	if len(as.fake.recs) != 0 {
		t.Fatalf("%d messages stored", len(as.fake.recs))
	}
	sameTree(t, before, snapshot(t, as.data))
	if v := testutil.ToFloat64(as.api.rejected); v == 0 {
		t.Fatal("replicator_http_rejected_paths_total not counted")
	}
}

func TestAbuseInvalidTopics(t *testing.T) {
	as := startAbuseServer(t, "", DefaultServerLimits(time.Second))
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	for _, topic := range []string{"%C3%28", "%ff", "a%00b", "caf%C3%A9", "a%20b", "a%2Fb", strings.Repeat("t", 128), "%E2%80%AE"} {
		resp, err := hc.Post("http://"+as.addr+"/v1/topics/"+topic+"/messages", "application/octet-stream", strings.NewReader("body"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		wantJSONError(t, "topic "+topic, resp.StatusCode, b)
	}
	if len(as.fake.recs) != 0 {
		t.Fatalf("%d messages stored", len(as.fake.recs))
	}
}

func TestAbuseOversizedBodies(t *testing.T) {
	as := startAbuseServer(t, "", DefaultServerLimits(time.Second))
	before := snapshot(t, as.data)
	big := strings.Repeat("x", 1<<20)
	for _, tc := range []struct{ what, req string }{
		{"put with Content-Length", "POST /v1/topics/T/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\nConnection: close\r\n\r\n" + big},
		{"put chunked", "POST /v1/topics/T/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n100000\r\n" + big + "\r\n0\r\n\r\n"},
		{"put lying Content-Length", "POST /v1/topics/T/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 9223372036854775807\r\nConnection: close\r\n\r\nabc"},
		{"metadata document", "PUT /v1/metadata/topics.json HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\nConnection: close\r\n\r\n" + big},
		{"metadata chunked", "PUT /v1/metadata/new.json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n100000\r\n" + big + "\r\n0\r\n\r\n"},
	} {
		code, b := raw(t, as.addr, tc.req)
		if code != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: %d %s, want 413", tc.what, code, b)
		}
		wantJSONError(t, tc.what, code, b)
	}
	// A header block over the limit: 431 (net/http's own answer, made JSON
	// by the limited listener), delivered rather than reset (the limited
	// listener half-closes).
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequest("POST", "http://"+as.addr+"/v1/topics/T/messages", strings.NewReader("x"))
	req.Header.Set("X-Big", strings.Repeat("h", 128<<10))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("huge headers: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("huge headers: %d, want 431", resp.StatusCode)
	}
	if len(as.fake.recs) != 0 {
		t.Fatalf("%d messages stored", len(as.fake.recs))
	}
	sameTree(t, before, snapshot(t, as.data))
}

// TestAbuseSlowloris holds connections that never finish their headers or
// their body: the server closes each after its timeout, connections over
// the limit are refused at once, and the API serves again afterwards.
func TestAbuseSlowloris(t *testing.T) {
	lim := DefaultServerLimits(time.Second)
	lim.ReadHeaderTimeout = 300 * time.Millisecond
	lim.ReadTimeout = 600 * time.Millisecond
	lim.MaxConns = 8
	as := startAbuseServer(t, "", lim)
	before := snapshot(t, as.data)

	var conns []net.Conn
	dial := func() net.Conn {
		c, err := net.Dial("tcp", as.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		return c
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// 6 clients stop in the middle of their headers, 2 in the middle of a body.
	for i := range 6 {
		fmt.Fprintf(dial(), "GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Slow-%d: ", i)
	}
	for range 2 {
		io.WriteString(dial(), "PUT /v1/metadata/topics.json HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"topicConfigTable\"")
	}
	// The ninth connection is over the limit: closed at once.
	over := dial()
	over.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := over.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("a connection over the limit was not closed: %v", err)
	}
	// Every slow connection is closed by the server within its timeout
	// (a generous bound: the machine is shared).
	start := time.Now()
	for i, c := range conns[:8] {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(c)
		if isTimeout(err) {
			t.Fatalf("slow connection %d still open after %s", i, time.Since(start))
		}
		if i >= 6 && len(b) > 0 && !bytes.Contains(b, []byte(" 4")) && !bytes.Contains(b, []byte(" 5")) {
			t.Fatalf("slow body answered %q", b)
		}
	}
	if v := testutil.ToFloat64(as.ln.(*limitListener).refused); v != 1 {
		t.Fatalf("replicator_http_refused_connections_total = %v, want 1", v)
	}
	// Serving again.
	code, b := raw(t, as.addr, "GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if code != 200 {
		t.Fatalf("after the slow clients: %d %s", code, b)
	}
	sameTree(t, before, snapshot(t, as.data))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestBearerToken(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	as := startAbuseServer(t, token, DefaultServerLimits(time.Second))
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	do := func(method, path, auth, body string) (int, http.Header, []byte) {
		req, err := http.NewRequestWithContext(context.Background(), method, "http://"+as.addr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	for _, path := range []string{"/v1/status", "/v1/messages", "/metrics", "/v1/metadata", "/v1/metadata/topics.json", "/nowhere"} {
		for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer wrong", "Bearer " + token + "x", "Basic " + token, "bearer" + token} {
			code, h, b := do("GET", path, auth, "")
			if code != http.StatusUnauthorized {
				t.Fatalf("GET %s with %q: %d, want 401", path, auth, code)
			}
			wantJSONError(t, "401", code, b)
			if h.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		}
		code, _, b := do("GET", path, "Bearer "+token, "")
		want := 200
		if path == "/nowhere" {
			want = 404
		}
		if code != want {
			t.Fatalf("GET %s with the token: %d %s", path, code, b)
		}
	}
	// The scheme is case-insensitive (RFC 7235).
	if code, _, _ := do("GET", "/v1/status", "bearer "+token, ""); code != 200 {
		t.Fatalf("lower-case scheme: %d", code)
	}
	// Writes need the token too, and nothing is stored without it.
	if code, _, _ := do("POST", "/v1/topics/T/messages", "", "m"); code != 401 {
		t.Fatalf("put without token: %d", code)
	}
	if code, _, _ := do("PUT", "/v1/metadata/topics.json", "Bearer nope", `{"topicConfigTable":{}}`); code != 401 {
		t.Fatalf("metadata put with a wrong token: %d", code)
	}
	if len(as.fake.recs) != 0 {
		t.Fatal("stored without a token")
	}
	if code, _, b := do("POST", "/v1/topics/T/messages", "Bearer "+token, "m"); code != 200 {
		t.Fatalf("put with the token: %d %s", code, b)
	}
	// Probes stay open.
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _, _ := do("GET", p, "", ""); code != 200 {
			t.Fatalf("%s without a token: %d", p, code)
		}
	}
	if m, i := testutil.ToFloat64(as.api.authFail.WithLabelValues("missing")), testutil.ToFloat64(as.api.authFail.WithLabelValues("invalid")); m == 0 || i == 0 {
		t.Fatalf("auth failures: missing %v, invalid %v", m, i)
	}
}
