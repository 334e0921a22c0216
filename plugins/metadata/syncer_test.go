package metadata

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/replicatorhq/replicator/sdk/meta"
)

func mustGather(t *testing.T, g prometheus.Gatherer) []*dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// testMaster is a real HTTP master: a Store behind NewHandler on an
// httptest server, counting requests, with switchable faults.
type testMaster struct {
	t     *testing.T
	store *Store
	clk   *fakeClock
	h     http.Handler
	srv   *httptest.Server
	addr  string

	mu    sync.Mutex
	lists int
	gets  map[string]int
	fault func(w http.ResponseWriter, r *http.Request) bool // true: answered
}

func newTestMaster(t *testing.T) *testMaster {
	t.Helper()
	m := &testMaster{t: t, clk: newFakeClock(), gets: map[string]int{}}
	st, err := Open(t.TempDir(), Options{Clock: m.clk, CreateDefaults: true})
	if err != nil {
		t.Fatal(err)
	}
	m.store = st
	m.h, err = NewHandler(HandlerConfig{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	m.start("127.0.0.1:0")
	t.Cleanup(func() { m.stop(); st.Close() })
	return m
}

func (m *testMaster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	if r.URL.Path == APIPath {
		m.lists++
	} else if r.Method == "GET" {
		m.gets[strings.TrimPrefix(r.URL.Path, apiPrefix)]++
	}
	fault := m.fault
	m.mu.Unlock()
	if fault != nil && fault(w, r) {
		return
	}
	m.h.ServeHTTP(w, r)
}

// start listens on addr (the previous address, to come back "up").
func (m *testMaster) start(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		m.t.Fatal(err)
	}
	m.srv = httptest.NewUnstartedServer(m)
	m.srv.Listener = ln
	m.srv.Start()
	m.addr = ln.Addr().String()
}

func (m *testMaster) stop() {
	if m.srv != nil {
		m.srv.Close()
		m.srv = nil
	}
}

func (m *testMaster) setFault(f func(w http.ResponseWriter, r *http.Request) bool) {
	m.mu.Lock()
	m.fault = f
	m.mu.Unlock()
}

func (m *testMaster) getCount(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gets[name]
}

func (m *testMaster) put(name, body string) meta.Document {
	m.t.Helper()
	m.clk.Advance(time.Millisecond)
	d, err := m.store.Put(context.Background(), name, json.RawMessage(body))
	if err != nil {
		m.t.Fatal(err)
	}
	return d
}

type testSlave struct {
	store  *Store
	dir    string
	syncer *Syncer
	clk    *fakeClock
	reg    *prometheus.Registry
	rounds chan SyncResult
	logs   *logBuffer
}

func newTestSlave(t *testing.T, m *testMaster, interval time.Duration) *testSlave {
	t.Helper()
	s := &testSlave{dir: t.TempDir(), clk: newFakeClock(), reg: prometheus.NewRegistry(), rounds: make(chan SyncResult, 64), logs: &logBuffer{}}
	var err error
	s.store, err = Open(s.dir, Options{Clock: s.clk})
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewHTTPSource(HTTPSourceConfig{BaseURL: "http://" + m.addr, Client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, MaxListSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	s.syncer, err = NewSyncer(SyncerConfig{
		Master: src, Local: s.store, Interval: interval, Clock: s.clk,
		Logger: newTestLogger(t, s.logs), Registerer: s.reg,
		AfterRound: func(r SyncResult) { s.rounds <- r },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.syncer.Close(); s.store.Close() })
	return s
}

// start runs the loop and waits for its first round.
func (s *testSlave) start(t *testing.T) SyncResult {
	t.Helper()
	if err := s.syncer.Start(); err != nil {
		t.Fatal(err)
	}
	<-s.clk.created
	return <-s.rounds
}

// tick fires the ticker and waits for the round it causes.
func (s *testSlave) tick() SyncResult {
	s.clk.Advance(10 * time.Second)
	s.clk.Tick()
	return <-s.rounds
}

func (s *testSlave) doc(t *testing.T, name string) meta.Document {
	t.Helper()
	return mustGet(t, s.store, name)
}

func TestSyncerReplicatesChanges(t *testing.T) {
	t.Parallel()
	m := newTestMaster(t)
	topics := m.put(TopicsName, `{"topicConfigTable":{"T":{"perm":6}}}`)
	s := newTestSlave(t, m, 10*time.Second)

	r := s.start(t)
	if r.Err != nil || strings.Join(r.Applied, ",") != "consumerOffset.json,delayOffset.json,subscriptionGroup.json,topics.json" {
		t.Fatalf("first round %+v", r)
	}
	if d := s.doc(t, TopicsName); d.Version != topics.Version || string(d.Body) != string(topics.Body) {
		t.Fatalf("slave topics %+v %s", d.Version, d.Body)
	}

	// A change on the master appears after the next tick, and only the
	// changed document is fetched again.
	topics2 := m.put(TopicsName, `{"topicConfigTable":{"T":{"perm":6},"U":{"perm":4}}}`)
	m.put("custom.json", `{"k":[1,2,3]}`)
	r = s.tick()
	if r.Err != nil || strings.Join(r.Applied, ",") != "custom.json,topics.json" {
		t.Fatalf("second round %+v", r)
	}
	if d := s.doc(t, TopicsName); d.Version != topics2.Version || string(d.Body) != string(topics2.Body) {
		t.Fatalf("slave topics %+v %s", d.Version, d.Body)
	}
	for name, want := range map[string]int{TopicsName: 2, SubscriptionGroupName: 1, DelayOffsetName: 1, ConsumerOffsetName: 1, "custom.json": 1} {
		if got := m.getCount(name); got != want {
			t.Errorf("master served %s %d times, want %d", name, got, want)
		}
	}
	// Nothing changed: a round lists and fetches nothing.
	if r = s.tick(); r.Err != nil || len(r.Applied) != 0 || r.Bytes != 0 {
		t.Fatalf("idle round %+v", r)
	}
	if got := m.getCount(TopicsName); got != 2 {
		t.Fatalf("unchanged topics.json fetched again (%d)", got)
	}
	// Trigger runs a round at once.
	m.put(DelayOffsetName, `{"offsetTable":{"1":77}}`)
	s.syncer.Trigger()
	if r = <-s.rounds; r.Err != nil || strings.Join(r.Applied, ",") != DelayOffsetName {
		t.Fatalf("triggered round %+v", r)
	}

	if got := testutil.ToFloat64(s.syncer.metrics.applied); got != 7 {
		t.Errorf("documents applied = %v, want 7", got)
	}
	if got := testutil.ToFloat64(s.syncer.metrics.failures); got != 0 {
		t.Errorf("failures = %v", got)
	}
	if got := testutil.ToFloat64(s.syncer.metrics.lastSync); got != float64(s.clk.Now().Unix()) {
		t.Errorf("last sync = %v, want %v", got, s.clk.Now().Unix())
	}
	if got := testutil.ToFloat64(s.syncer.metrics.bytes); got <= 0 {
		t.Errorf("bytes = %v", got)
	}
	n, err := testutil.GatherAndCount(s.reg, "replicator_metadata_last_sync_timestamp_seconds", "replicator_metadata_sync_failures_total",
		"replicator_metadata_documents_applied_total", "replicator_metadata_sync_bytes_total")
	if err != nil || n != 4 {
		t.Fatalf("registered metrics %d %v", n, err)
	}
	if problems, err := promlint.NewWithMetricFamilies(mustGather(t, s.reg)).Lint(); err != nil || len(problems) > 0 {
		t.Fatalf("promlint: %v %+v", err, problems)
	}
	if st := s.syncer.Status(); !st.Healthy || st.Rounds != 4 || st.Failures != 0 || !st.LastSuccess.Equal(s.clk.Now()) {
		t.Fatalf("status %+v", st)
	}
}

func TestSyncerMergesConsumerOffsets(t *testing.T) {
	t.Parallel()
	m := newTestMaster(t)
	master := m.put(ConsumerOffsetName, `{"offsetTable":{"T@both":{"0":9},"T@new":{"2":3}},"extra":true}`)
	m.put(TopicsName, `{"topicConfigTable":{"M":{}}}`)
	s := newTestSlave(t, m, time.Second)
	ctx := context.Background()
	if err := s.store.Apply(ctx, []meta.Document{
		{Name: ConsumerOffsetName, Version: meta.DataVersion{Counter: 1}, Body: json.RawMessage(`{"offsetTable":{"T@old":{0:5},"T@both":{"0":1,"1":1}}}`)},
		{Name: TopicsName, Version: meta.DataVersion{Counter: 1}, Body: json.RawMessage(`{"topicConfigTable":{"SlaveOnly":{}}}`)},
	}); err != nil {
		t.Fatal(err)
	}
	if r := s.syncer.SyncOnce(ctx); r.Err != nil {
		t.Fatal(r.Err)
	}
	co := s.doc(t, ConsumerOffsetName)
	if co.Version != master.Version {
		t.Fatalf("consumer offsets version %+v, want the master's %+v", co.Version, master.Version)
	}
	if string(co.Body) != `{"offsetTable":{"T@both":{"0":9},"T@new":{"2":3},"T@old":{"0":5}},"extra":true}` {
		t.Fatalf("merged consumer offsets %s", co.Body)
	}
	if tp := s.doc(t, TopicsName); string(tp.Body) != `{"topicConfigTable":{"M":{}}}` {
		t.Fatalf("topics not replaced: %s", tp.Body)
	}
	// An entry deleted on the master stays on the slave; a changed one is taken.
	m.put(ConsumerOffsetName, `{"offsetTable":{"T@both":{"0":10}}}`)
	if r := s.syncer.SyncOnce(ctx); r.Err != nil {
		t.Fatal(r.Err)
	}
	if co := s.doc(t, ConsumerOffsetName); string(co.Body) != `{"offsetTable":{"T@both":{"0":10},"T@new":{"2":3},"T@old":{"0":5}}}` {
		t.Fatalf("after master dropped T@new: %s", co.Body)
	}
}

func TestSyncerMergeConsumerOffsetsRules(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, local, master, want string
		err                       bool
	}{
		{"no local", "", `{"offsetTable":{"a@g":{"0":1}}}`, `{"offsetTable":{"a@g":{"0":1}}}`, false},
		{"put-all per key", `{"offsetTable":{"a@g":{"0":1,"1":2}}}`, `{"offsetTable":{"a@g":{"0":5}}}`, `{"offsetTable":{"a@g":{"0":5}}}`, false},
		{"master lacks table", `{"offsetTable":{"a@g":{"0":1}}}`, `{"x":1}`, `{"x":1,"offsetTable":{"a@g":{"0":1}}}`, false},
		{"master null table", `{"offsetTable":{"a@g":{"0":1}}}`, `{"offsetTable":null}`, `{"offsetTable":{"a@g":{"0":1}}}`, false},
		{"malformed local ignored", `{"offsetTable":[1]}`, `{"offsetTable":{"b@g":{"0":1}}}`, `{"offsetTable":{"b@g":{"0":1}}}`, false},
		{"master table not object", ``, `{"offsetTable":[1]}`, ``, true},
		{"master entry not offsets", ``, `{"offsetTable":{"a@g":{"0":"x"}}}`, ``, true},
		{"master not object", ``, `[]`, ``, true},
	}
	for _, c := range cases {
		var local json.RawMessage
		if c.local != "" {
			local = json.RawMessage(c.local)
		}
		got, err := MergeConsumerOffsets(local, json.RawMessage(c.master))
		if c.err {
			if !errors.Is(err, meta.ErrInvalidDocument) {
				t.Errorf("%s: err %v, want meta.ErrInvalidDocument", c.name, err)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("%s: got %s %v, want %s", c.name, got, err, c.want)
		}
	}
}

// TestSyncerMasterDownThenUp: the master goes away for three ticks and
// comes back on the same address. The slave keeps its copy, logs one Warn
// and one Info, counts three failures, and catches up.
func TestSyncerMasterDownThenUp(t *testing.T) {
	t.Parallel()
	m := newTestMaster(t)
	m.put(TopicsName, `{"topicConfigTable":{"A":{}}}`)
	s := newTestSlave(t, m, 10*time.Second)
	if r := s.start(t); r.Err != nil {
		t.Fatal(r.Err)
	}
	before := dirSnapshot(t, s.dir)

	m.stop()
	for i := 0; i < 3; i++ {
		if r := s.tick(); r.Err == nil {
			t.Fatal("round succeeded with the master down")
		}
	}
	if after := dirSnapshot(t, s.dir); !sameSnapshot(before, after) {
		t.Fatal("slave copy changed while the master was down")
	}
	if st := s.syncer.Status(); st.Healthy || st.Failures != 3 || st.LastError == nil {
		t.Fatalf("status while down %+v", st)
	}

	m.start(m.addr)
	changed := m.put(TopicsName, `{"topicConfigTable":{"A":{},"B":{}}}`)
	if r := s.tick(); r.Err != nil || strings.Join(r.Applied, ",") != TopicsName {
		t.Fatalf("round after recovery %+v", r)
	}
	if r := s.tick(); r.Err != nil {
		t.Fatal(r.Err)
	}
	if d := s.doc(t, TopicsName); d.Version != changed.Version {
		t.Fatalf("slave did not catch up: %+v", d.Version)
	}
	if n := s.logs.count("warn", "metadata sync failing"); n != 1 {
		t.Errorf("%d Warn lines for the failure, want 1:\n%s", n, s.logs)
	}
	if n := s.logs.count("info", "metadata sync recovered"); n != 1 {
		t.Errorf("%d Info lines for the recovery, want 1:\n%s", n, s.logs)
	}
	if n := s.logs.count("info", "metadata sync healthy"); n != 1 {
		t.Errorf("%d Info lines for the first success, want 1:\n%s", n, s.logs)
	}
	if got := testutil.ToFloat64(s.syncer.metrics.failures); got != 3 {
		t.Errorf("failures = %v, want 3", got)
	}
}

// TestSyncerMalformedAnswers: every kind of bad answer fails the round,
// leaves the slave's copy alone and counts a failure.
func TestSyncerMalformedAnswers(t *testing.T) {
	t.Parallel()
	answer := func(path string, code int, body string) func(w http.ResponseWriter, r *http.Request) bool {
		return func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path != path {
				return false
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			w.Write([]byte(body))
			return true
		}
	}
	streamed := func(path string, n int) func(w http.ResponseWriter, r *http.Request) bool {
		return func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path != path {
				return false
			}
			w.WriteHeader(200)
			chunk := []byte(`{"documents":[` + strings.Repeat(" ", 4096))
			for i := 0; i < n/len(chunk); i++ {
				if _, err := w.Write(chunk); err != nil {
					return true
				}
				w.(http.Flusher).Flush() // no Content-Length: the bound must hold while reading
			}
			return true
		}
	}
	topicsPath := apiPrefix + TopicsName
	cases := []struct {
		name  string
		fault func(w http.ResponseWriter, r *http.Request) bool
		want  error
	}{
		{"list not JSON", answer(APIPath, 200, `<html>`), ErrBadResponse},
		{"list without documents", answer(APIPath, 200, `{"docs":[]}`), ErrBadResponse},
		{"list with a bad name", answer(APIPath, 200, `{"documents":[{"name":"../x","dataVersion":{}}]}`), ErrBadResponse},
		{"list with a duplicate", answer(APIPath, 200, `{"documents":[{"name":"a","dataVersion":{}},{"name":"a","dataVersion":{}}]}`), ErrBadResponse},
		{"list 500", answer(APIPath, 500, `{"error":"boom"}`), ErrBadResponse},
		{"list over its bound", streamed(APIPath, 1<<20), meta.ErrTooLarge},
		{"document not JSON", answer(topicsPath, 200, `{"dataVersion":`), ErrBadResponse},
		{"document not an object", answer(topicsPath, 200, `[1]`), ErrBadResponse},
		{"document over its bound", answer(topicsPath, 200, `{"x":"`+strings.Repeat("a", DefaultMaxDocumentSize+2048)+`"}`), meta.ErrTooLarge},
		{"consumer offsets malformed", answer(apiPrefix+ConsumerOffsetName, 200, `{"offsetTable":{"a@g":7}}`), meta.ErrInvalidDocument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := newTestMaster(t)
			s := newTestSlave(t, m, time.Second)
			ctx := context.Background()
			if r := s.syncer.SyncOnce(ctx); r.Err != nil {
				t.Fatal(r.Err)
			}
			m.put(TopicsName, `{"topicConfigTable":{"New":{}}}`)
			m.put(ConsumerOffsetName, `{"offsetTable":{"a@g":{"0":1}}}`)
			before := dirSnapshot(t, s.dir)
			m.setFault(c.fault)
			r := s.syncer.SyncOnce(ctx)
			if !errors.Is(r.Err, c.want) {
				t.Fatalf("round error %v, want %v", r.Err, c.want)
			}
			if after := dirSnapshot(t, s.dir); !sameSnapshot(before, after) {
				t.Fatal("slave copy changed by a failed round")
			}
			if got := testutil.ToFloat64(s.syncer.metrics.failures); got != 1 {
				t.Fatalf("failures = %v", got)
			}
			m.setFault(nil)
			if r := s.syncer.SyncOnce(ctx); r.Err != nil || len(r.Applied) != 2 {
				t.Fatalf("round after the fault %+v", r)
			}
		})
	}
}

func TestSyncerLifecycle(t *testing.T) {
	t.Parallel()
	m := newTestMaster(t)
	s := newTestSlave(t, m, time.Second)
	s.start(t)
	if err := s.syncer.Start(); err == nil {
		t.Fatal("second Start succeeded")
	}
	if err := s.syncer.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.syncer.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.syncer.Start(); !errors.Is(err, meta.ErrClosed) {
		t.Fatalf("Start after Close = %v", err)
	}
	if _, err := NewSyncer(SyncerConfig{}); err == nil {
		t.Fatal("NewSyncer without Master and Local succeeded")
	}
	// The same registry twice (a node changing role creates a new syncer):
	// the second syncer takes over the first one's collectors.
	reg := prometheus.NewRegistry()
	cfg := SyncerConfig{Master: m.store, Local: s.store, Registerer: reg}
	first, err := NewSyncer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	second, err := NewSyncer(cfg)
	if err != nil {
		t.Fatalf("second syncer on the same registry: %v", err)
	}
	first.metrics.failures.Inc()
	if first.metrics.failures != second.metrics.failures || first.metrics.lastSync != second.metrics.lastSync ||
		testutil.ToFloat64(second.metrics.failures) != 1 {
		t.Fatal("the second syncer does not count into the registered collectors")
	}
	// A collector of another kind under a syncer metric's name: refused.
	clash := prometheus.NewRegistry()
	clash.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "replicator_metadata_last_sync_timestamp_seconds", Help: "x"}))
	if _, err := NewSyncer(SyncerConfig{Master: m.store, Local: s.store, Registerer: clash}); err == nil {
		t.Fatal("a clashing registration succeeded")
	}
}

// TestSyncerSchedule runs the loop on the real clock inside a synctest
// bubble (fake time, instant): a round at start, one per interval, one per
// Trigger, and none after Close. The master is a Store in-process, so no
// socket keeps the bubble's clock from moving.
func TestSyncerSchedule(t *testing.T) {
	t.Parallel()
	masterDir, slaveDir := t.TempDir(), t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		master, err := Open(masterDir, Options{CreateDefaults: true})
		if err != nil {
			t.Fatal(err)
		}
		defer master.Close()
		slave, err := Open(slaveDir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer slave.Close()
		start := time.Now()
		var mu sync.Mutex
		var at []time.Duration
		sy, err := NewSyncer(SyncerConfig{Master: master, Local: slave, Interval: 10 * time.Second,
			AfterRound: func(SyncResult) { mu.Lock(); at = append(at, time.Since(start)); mu.Unlock() }})
		if err != nil {
			t.Fatal(err)
		}
		if err := sy.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(25 * time.Second) // fake time
		synctest.Wait()
		sy.Trigger()
		synctest.Wait()
		sy.Close()
		time.Sleep(time.Minute)
		mu.Lock()
		defer mu.Unlock()
		want := []time.Duration{0, 10 * time.Second, 20 * time.Second, 25 * time.Second}
		if len(at) != len(want) {
			t.Fatalf("rounds at %v, want %v", at, want)
		}
		for i := range want {
			if at[i] != want[i] {
				t.Fatalf("rounds at %v, want %v", at, want)
			}
		}
		if list, _ := slave.List(context.Background()); len(list) != 4 {
			t.Fatalf("slave has %d documents", len(list))
		}
	})
}
