package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeBackend is an in-memory log of records of a fixed size per body byte.
type fakeBackend struct {
	mu       sync.Mutex
	recs     []record.Record
	min, max int64
	watchers map[chan<- struct{}]bool
	watched  chan struct{} // a send per Watch call
	putErr   error
	status   core.PutStatus
	slave    bool
}

func newFake() *fakeBackend {
	return &fakeBackend{watchers: map[chan<- struct{}]bool{}, watched: make(chan struct{}, 16)}
}

const recOverhead = 100

// PutBatch puts the messages one after the other (Put does not wait).
func (f *fakeBackend) PutBatch(ctx context.Context, msgs []*record.Message) []core.BatchPut {
	return putInTurn(ctx, f.Put, msgs)
}

// putInTurn is PutBatch by put, one message after the other.
func putInTurn(ctx context.Context, put func(context.Context, *record.Message) (core.PutResult, error), msgs []*record.Message) []core.BatchPut {
	out := make([]core.BatchPut, len(msgs))
	for i, m := range msgs {
		out[i].PutResult, out[i].Err = put(ctx, m)
	}
	return out
}

func (f *fakeBackend) Put(ctx context.Context, msg *record.Message) (core.PutResult, error) {
	if f.slave {
		return core.PutResult{}, core.ErrSlaveWriteProtected
	}
	if f.putErr != nil && !errors.Is(f.putErr, store.ErrFlushDiskTimeout) {
		return core.PutResult{}, f.putErr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	size := int32(recOverhead + len(msg.Body))
	qo := int64(0)
	for _, r := range f.recs {
		if r.Topic == msg.Topic && r.QueueID == msg.QueueID {
			qo++
		}
	}
	rec := record.Record{Message: *msg, TotalSize: size, PhysicalOffset: f.max, QueueOffset: qo, StoreTimestamp: 42}
	f.recs = append(f.recs, rec)
	f.max += int64(size)
	for ch := range f.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return core.PutResult{Status: f.status, Offset: rec.PhysicalOffset, NextOffset: f.max, QueueOffset: qo}, f.putErr
}

func (f *fakeBackend) ReadMessages(offset int64, n int) ([]record.Record, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if offset < f.min || offset > f.max {
		return nil, 0, store.ErrOffsetOutOfRange
	}
	if offset == f.max {
		return nil, offset, nil
	}
	for i, r := range f.recs {
		if r.PhysicalOffset == offset {
			end := min(i+n, len(f.recs))
			out := append([]record.Record(nil), f.recs[i:end]...)
			last := out[len(out)-1]
			return out, last.PhysicalOffset + int64(last.TotalSize), nil
		}
	}
	return nil, 0, fmt.Errorf("fake: %w", store.ErrNotBoundary)
}

func (f *fakeBackend) Bounds() store.Bounds {
	f.mu.Lock()
	defer f.mu.Unlock()
	return store.Bounds{Min: f.min, Max: f.max, Flushed: f.max, SegmentSize: 1 << 20}
}

func (f *fakeBackend) Watch(ch chan<- struct{}) func() {
	f.mu.Lock()
	f.watchers[ch] = true
	f.mu.Unlock()
	f.watched <- struct{}{}
	return func() {
		f.mu.Lock()
		delete(f.watchers, ch)
		f.mu.Unlock()
	}
}

func (f *fakeBackend) Status() Status {
	if f.slave {
		return Status{Role: "SLAVE", Master: &MasterLink{Addr: "127.0.0.1:10912", Connected: true, AckSent: 7, LastFrameMsAgo: -1}}
	}
	return Status{Role: "ASYNC_MASTER", HAAddr: "127.0.0.1:10912", Slaves: []SlaveStatus{}}
}

func (f *fakeBackend) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.recs)
}

func newTestServer(t *testing.T, b *fakeBackend, mod func(*Config)) (*Server, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	cfg := Config{Backend: b, Gatherer: reg, Registerer: reg, MaxBodyBytes: 1024, MaxReadBytes: 4096, Version: "test"}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, reg
}

type answer struct {
	code int
	hdr  http.Header
	body []byte
}

func do(t *testing.T, h http.Handler, method, target string, body io.Reader, hdr map[string][]string) answer {
	t.Helper()
	req := httptest.NewRequest(method, target, body)
	req.RemoteAddr = "10.1.2.3:4567"
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return answer{rec.Code, rec.Header(), rec.Body.Bytes()}
}

func (a answer) json(t *testing.T, v any) {
	t.Helper()
	if ct := a.hdr.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("bad JSON %q: %v", a.body, err)
	}
}

func TestAPIPut(t *testing.T) {
	b := newFake()
	s, _ := newTestServer(t, b, nil)
	a := do(t, s, "POST", "/v1/topics/TopicTest/messages?queue=3&tags=tagA&keys=k1%20k2", strings.NewReader("hello"),
		map[string][]string{PropertyHeader: {"color=blue, size=10", "note=a%2Cb%3Dc"}})
	if a.code != 200 {
		t.Fatalf("code %d: %s", a.code, a.body)
	}
	var ans PutAnswer
	a.json(t, &ans)
	if ans != (PutAnswer{Status: "PUT_OK", Offset: 0, NextOffset: recOverhead + 5, QueueOffset: 0}) {
		t.Fatalf("answer %+v", ans)
	}
	rec := b.recs[0]
	if rec.Topic != "TopicTest" || rec.QueueID != 3 || string(rec.Body) != "hello" {
		t.Fatalf("stored %+v", rec)
	}
	want := map[string]string{"TAGS": "tagA", "KEYS": "k1 k2", "color": "blue", "size": "10", "note": "a,b=c"}
	if fmt.Sprint(rec.Properties) != fmt.Sprint(want) {
		t.Fatalf("properties %v, want %v", rec.Properties, want)
	}
	if rec.BornHost.String() != "10.1.2.3:4567" {
		t.Fatalf("born host %v", rec.BornHost)
	}

	// Statuses other than PUT_OK are answers, not errors.
	for _, st := range []core.PutStatus{core.FlushSlaveTimeout, core.SlaveNotAvailable, core.FlushDiskTimeout} {
		b.status = st
		a := do(t, s, "POST", "/v1/topics/T/messages", strings.NewReader("x"), nil)
		var ans PutAnswer
		a.json(t, &ans)
		if a.code != 200 || ans.Status != st.String() {
			t.Fatalf("status %v: code %d answer %+v", st, a.code, ans)
		}
	}
	b.status = core.PutOK
	b.putErr = fmt.Errorf("wrapped: %w", store.ErrFlushDiskTimeout)
	a = do(t, s, "POST", "/v1/topics/T/messages", strings.NewReader("x"), nil)
	a.json(t, &ans)
	if a.code != 200 || ans.Status != "FLUSH_DISK_TIMEOUT" {
		t.Fatalf("flush disk timeout: code %d answer %+v", a.code, ans)
	}
}

func TestAPIPutErrors(t *testing.T) {
	big := strings.Repeat("x", 1025)
	tests := []struct {
		name   string
		method string
		target string
		body   io.Reader
		hdr    map[string][]string
		setup  func(b *fakeBackend)
		code   int
		want   string
	}{
		{"bad topic", "POST", "/v1/topics/bad%20topic/messages", strings.NewReader("x"), nil, nil, 400, "invalid topic"},
		{"long topic", "POST", "/v1/topics/" + strings.Repeat("t", 128) + "/messages", strings.NewReader("x"), nil, nil, 400, "invalid topic"},
		{"bad queue", "POST", "/v1/topics/T/messages?queue=x", strings.NewReader("x"), nil, nil, 400, "invalid queue"},
		{"negative queue", "POST", "/v1/topics/T/messages?queue=-1", strings.NewReader("x"), nil, nil, 400, "invalid queue"},
		{"queue too big", "POST", "/v1/topics/T/messages?queue=1024", strings.NewReader("x"), nil, nil, 400, "invalid queue"},
		{"empty queue", "POST", "/v1/topics/T/messages?queue=", strings.NewReader("x"), nil, nil, 400, "invalid queue"},
		{"unknown param", "POST", "/v1/topics/T/messages?tag=x", strings.NewReader("x"), nil, nil, 400, `unknown query parameter "tag"`},
		{"repeated param", "POST", "/v1/topics/T/messages?tags=a&tags=b", strings.NewReader("x"), nil, nil, 400, "given 2 times"},
		{"property not k=v", "POST", "/v1/topics/T/messages", strings.NewReader("x"), map[string][]string{PropertyHeader: {"novalue"}}, nil, 400, "not name=value"},
		{"property bad escape", "POST", "/v1/topics/T/messages", strings.NewReader("x"), map[string][]string{PropertyHeader: {"a=%zz"}}, nil, 400, "escape"},
		{"property separator", "POST", "/v1/topics/T/messages", strings.NewReader("x"), map[string][]string{PropertyHeader: {"a=%01"}}, nil, 400, "invalid property"},
		{"property empty value", "POST", "/v1/topics/T/messages", strings.NewReader("x"), map[string][]string{PropertyHeader: {"a="}}, nil, 400, "invalid property"},
		{"property twice", "POST", "/v1/topics/T/messages", strings.NewReader("x"), map[string][]string{PropertyHeader: {"a=1", "a=2"}}, nil, 400, "given twice"},
		{"tags twice", "POST", "/v1/topics/T/messages?tags=x", strings.NewReader("x"), map[string][]string{PropertyHeader: {"TAGS=y"}}, nil, 400, "given both"},
		{"empty body", "POST", "/v1/topics/T/messages", strings.NewReader(""), nil, nil, 400, "empty body"},
		{"oversized body", "POST", "/v1/topics/T/messages", strings.NewReader(big), nil, nil, 413, "larger than the limit"},
		{"oversized chunked body", "POST", "/v1/topics/T/messages", io.MultiReader(strings.NewReader(big)), nil, nil, 413, "larger than the limit"},
		{"slave", "POST", "/v1/topics/T/messages", strings.NewReader("x"), nil, func(b *fakeBackend) { b.slave = true }, 403, "slave"},
		{"store says too large", "POST", "/v1/topics/T/messages", strings.NewReader("x"), nil, func(b *fakeBackend) { b.putErr = fmt.Errorf("x: %w", store.ErrMessageTooLarge) }, 413, "too large"},
		{"store says bad topic", "POST", "/v1/topics/T/messages", strings.NewReader("x"), nil, func(b *fakeBackend) { b.putErr = fmt.Errorf("x: %w", store.ErrInvalidTopic) }, 400, "invalid topic"},
		{"closed", "POST", "/v1/topics/T/messages", strings.NewReader("x"), nil, func(b *fakeBackend) { b.putErr = core.ErrClosed }, 503, "shutting down"},
		{"store broken", "POST", "/v1/topics/T/messages", strings.NewReader("x"), nil, func(b *fakeBackend) { b.putErr = store.ErrCorrupt }, 500, "put failed"},
		{"GET on put", "GET", "/v1/topics/T/messages", nil, nil, nil, 405, "not allowed"},
		{"no messages path", "POST", "/v1/topics/T", strings.NewReader("x"), nil, nil, 404, "no such endpoint"},
		{"unknown path", "GET", "/v2/status", nil, nil, nil, 404, "no such endpoint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newFake()
			if tc.setup != nil {
				tc.setup(b)
			}
			s, _ := newTestServer(t, b, nil)
			a := do(t, s, tc.method, tc.target, tc.body, tc.hdr)
			if a.code != tc.code {
				t.Fatalf("code %d, want %d: %s", a.code, tc.code, a.body)
			}
			var ea ErrorAnswer
			a.json(t, &ea)
			if !strings.Contains(ea.Error, tc.want) {
				t.Fatalf("error %q does not contain %q", ea.Error, tc.want)
			}
			if b.count() != 0 {
				t.Fatalf("a refused put wrote %d records", b.count())
			}
			if tc.code == 405 && a.hdr.Get("Allow") != "POST" {
				t.Fatalf("Allow %q", a.hdr.Get("Allow"))
			}
		})
	}
}

func putN(t *testing.T, s http.Handler, n int, body func(i int) string) {
	t.Helper()
	for i := range n {
		if a := do(t, s, "POST", "/v1/topics/T/messages", strings.NewReader(body(i)), nil); a.code != 200 {
			t.Fatalf("put %d: %d %s", i, a.code, a.body)
		}
	}
}

func TestAPIMessages(t *testing.T) {
	b := newFake()
	s, _ := newTestServer(t, b, nil)
	putN(t, s, 10, func(i int) string { return fmt.Sprintf("m%d", i) })

	var page Messages
	a := do(t, s, "GET", "/v1/messages", nil, nil)
	a.json(t, &page)
	if a.code != 200 || len(page.Messages) != 10 || page.NextOffset != b.max || page.MaxOffset != b.max {
		t.Fatalf("code %d page %+v", a.code, page)
	}
	if string(page.Messages[3].Body) != "m3" || page.Messages[3].Offset != 3*(recOverhead+2) || page.Messages[3].Topic != "T" {
		t.Fatalf("message 3: %+v", page.Messages[3])
	}
	// The body travels as base64.
	var raw struct {
		Messages []map[string]any `json:"messages"`
	}
	json.Unmarshal(a.body, &raw)
	if raw.Messages[0]["body"] != base64.StdEncoding.EncodeToString([]byte("m0")) {
		t.Fatalf("body field %v", raw.Messages[0]["body"])
	}

	a = do(t, s, "GET", fmt.Sprintf("/v1/messages?offset=%d&max=2", 2*(recOverhead+2)), nil, nil)
	a.json(t, &page)
	if len(page.Messages) != 2 || string(page.Messages[0].Body) != "m2" || page.NextOffset != 4*(recOverhead+2) {
		t.Fatalf("page %+v", page)
	}
	// At the end: empty, next_offset unchanged.
	a = do(t, s, "GET", fmt.Sprintf("/v1/messages?offset=%d", b.max), nil, nil)
	a.json(t, &page)
	if a.code != 200 || len(page.Messages) != 0 || page.NextOffset != b.max {
		t.Fatalf("end page %d %+v", a.code, page)
	}
	if !bytes.Contains(a.body, []byte(`"messages":[]`)) {
		t.Fatalf("empty page should have an empty list: %s", a.body)
	}
}

func TestAPIMessagesByteLimit(t *testing.T) {
	b := newFake()
	s, _ := newTestServer(t, b, nil) // MaxReadBytes 4096
	putN(t, s, 10, func(int) string { return strings.Repeat("y", 1000) })
	var page Messages
	do(t, s, "GET", "/v1/messages?max=10", nil, nil).json(t, &page)
	if len(page.Messages) != 4 || page.NextOffset != 4*(recOverhead+1000) {
		t.Fatalf("got %d messages, next %d", len(page.Messages), page.NextOffset)
	}
	// A single record larger than the limit still comes back.
	s2, _ := newTestServer(t, b, func(c *Config) { c.MaxReadBytes = 10 })
	do(t, s2, "GET", "/v1/messages", nil, nil).json(t, &page)
	if len(page.Messages) != 1 {
		t.Fatalf("got %d messages", len(page.Messages))
	}
}

func TestAPIMessagesErrors(t *testing.T) {
	b := newFake()
	s, _ := newTestServer(t, b, nil)
	putN(t, s, 3, func(int) string { return "z" })
	tests := []struct {
		target string
		code   int
		want   string
	}{
		{"/v1/messages?offset=x", 400, "invalid offset"},
		{"/v1/messages?offset=-1", 400, "invalid offset"},
		{"/v1/messages?offset=1", 400, "not the start of a record"},
		{"/v1/messages?offset=100000", 416, "outside the log"},
		{"/v1/messages?max=0", 400, "invalid max"},
		{"/v1/messages?max=1025", 400, "invalid max"},
		{"/v1/messages?max=y", 400, "invalid max"},
		{"/v1/messages?wait=1", 400, "invalid wait"},
		{"/v1/messages?wait=31s", 400, "invalid wait"},
		{"/v1/messages?from=0", 400, "unknown query parameter"},
		{"/v1/messages?offset=0&offset=0", 400, "given 2 times"},
	}
	for _, tc := range tests {
		a := do(t, s, "GET", tc.target, nil, nil)
		var ea ErrorAnswer
		a.json(t, &ea)
		if a.code != tc.code || !strings.Contains(ea.Error, tc.want) {
			t.Errorf("%s: %d %q, want %d %q", tc.target, a.code, ea.Error, tc.code, tc.want)
		}
	}
	if a := do(t, s, "POST", "/v1/messages", nil, nil); a.code != 405 || a.hdr.Get("Allow") != "GET" {
		t.Errorf("POST /v1/messages: %d allow %q", a.code, a.hdr.Get("Allow"))
	}
}

func TestAPIMessagesLongPoll(t *testing.T) {
	b := newFake()
	s, _ := newTestServer(t, b, nil)
	ts := httptest.NewServer(s)
	defer ts.Close()

	got := make(chan Messages, 1)
	go func() {
		resp, err := http.Get(ts.URL + "/v1/messages?offset=0&wait=20s")
		if err != nil {
			t.Error(err)
			got <- Messages{}
			return
		}
		defer resp.Body.Close()
		var m Messages
		json.NewDecoder(resp.Body).Decode(&m)
		got <- m
	}()
	// Wait until the poll is registered, then put.
	<-b.watched
	putN(t, s, 1, func(int) string { return "late" })
	m := <-got
	if len(m.Messages) != 1 || string(m.Messages[0].Body) != "late" {
		t.Fatalf("long poll got %+v", m)
	}

	// Drain ends a pending poll at once.
	done := make(chan int, 1)
	go func() {
		resp, err := http.Get(fmt.Sprintf("%s/v1/messages?offset=%d&wait=20s", ts.URL, b.max))
		if err != nil {
			t.Error(err)
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-b.watched
	s.Drain()
	if code := <-done; code != 200 {
		t.Fatalf("drained poll answered %d", code)
	}
}

func TestAPIStatus(t *testing.T) {
	b := newFake()
	s, _ := newTestServer(t, b, nil)
	putN(t, s, 2, func(int) string { return "s" })
	a := do(t, s, "GET", "/v1/status", nil, nil)
	var raw map[string]any
	a.json(t, &raw)
	for _, k := range []string{"role", "max_offset", "min_offset", "flushed_offset", "slaves"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("master status lacks %q: %s", k, a.body)
		}
	}
	if _, ok := raw["master"]; ok {
		t.Errorf("master status has a master: %s", a.body)
	}
	if raw["max_offset"].(float64) != float64(b.max) || raw["version"] != "test" {
		t.Errorf("status %s", a.body)
	}
	b.slave = true
	a = do(t, s, "GET", "/v1/status", nil, nil)
	raw = nil
	a.json(t, &raw)
	m, ok := raw["master"].(map[string]any)
	if !ok || m["addr"] != "127.0.0.1:10912" || m["connected"] != true || m["ack_sent"].(float64) != 7 {
		t.Errorf("slave status %s", a.body)
	}
	if _, ok := raw["slaves"]; ok {
		t.Errorf("slave status has slaves: %s", a.body)
	}
	if a := do(t, s, "GET", "/v1/status?x=1", nil, nil); a.code != 400 {
		t.Errorf("status with a query: %d", a.code)
	}
}

func TestAPIHealthAndMetrics(t *testing.T) {
	b := newFake()
	s, reg := newTestServer(t, b, nil)
	if a := do(t, s, "GET", "/healthz", nil, nil); a.code != 200 {
		t.Fatalf("healthz %d", a.code)
	}
	if a := do(t, s, "GET", "/readyz", nil, nil); a.code != 503 || !bytes.Contains(a.body, []byte("starting")) {
		t.Fatalf("readyz before ready: %d %s", a.code, a.body)
	}
	s.SetReady(true)
	if a := do(t, s, "GET", "/readyz", nil, nil); a.code != 200 {
		t.Fatalf("readyz %d", a.code)
	}
	if a := do(t, s, "HEAD", "/readyz", nil, nil); a.code != 200 {
		t.Fatalf("HEAD readyz %d", a.code)
	}
	s.Drain()
	if a := do(t, s, "GET", "/readyz", nil, nil); a.code != 503 || !bytes.Contains(a.body, []byte("shutting down")) {
		t.Fatalf("readyz after drain: %d %s", a.code, a.body)
	}
	putN(t, s, 1, func(int) string { return "m" })
	do(t, s, "GET", "/nope", nil, nil)
	a := do(t, s, "GET", "/metrics", nil, nil)
	if a.code != 200 || !bytes.Contains(a.body, []byte(`replicator_http_requests_total{code="200",route="put"} 1`)) ||
		!bytes.Contains(a.body, []byte("go_goroutines")) {
		t.Fatalf("metrics %d:\n%s", a.code, a.body)
	}
	if n := testutil.ToFloat64(s.reqs.WithLabelValues("other", "404")); n != 1 {
		t.Fatalf("404s counted %v", n)
	}
	problems, err := promlint.NewWithMetricFamilies(mustGather(t, reg)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "replicator_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
}

func mustGather(t *testing.T, g prometheus.Gatherer) []*dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}
