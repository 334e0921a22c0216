package api

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/replicatorhq/replicator/client"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/sdk/proto/producerv1"
	"github.com/replicatorhq/replicator/sdk/record"
)

// lockedBuf is a log sink safe for concurrent writes.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) lines(sub string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ln := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(ln, sub) {
			out = append(out, ln)
		}
	}
	return out
}

// streamServer is an API server on a real loopback listener.
type streamServer struct {
	api  *Server
	addr string
	reg  *prometheus.Registry
	logs *lockedBuf
	srv  *http.Server
}

func startStreamServer(t *testing.T, b Backend, mod func(*Config)) *streamServer {
	t.Helper()
	ss := &streamServer{reg: prometheus.NewRegistry(), logs: &lockedBuf{}}
	cfg := Config{Backend: b, Registerer: ss.reg, Gatherer: ss.reg, MaxBodyBytes: 1024,
		Logger: hclog.New(&hclog.LoggerOptions{Output: ss.logs, Level: hclog.Debug})}
	if mod != nil {
		mod(&cfg)
	}
	var err error
	if ss.api, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ss.addr = ln.Addr().String()
	srv := ss.api.HTTPServer(DefaultServerLimits(time.Second))
	ss.srv = srv
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		ss.api.Drain()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			srv.Close()
		}
		<-done
	})
	return ss
}

func dialStream(t *testing.T, addr string, opts ...client.Option) *client.Producer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := client.Dial(ctx, []string{"http://" + addr}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// funcBackend is a fakeBackend whose Put can be replaced.
type funcBackend struct {
	*fakeBackend
	put func(ctx context.Context, msg *record.Message) (core.PutResult, error)
}

// PutBatch puts each message concurrently, as the stream's puts did.
func (f *funcBackend) PutBatch(ctx context.Context, msgs []*record.Message) []core.BatchPut {
	return putEach(ctx, f.Put, msgs)
}

// putEach is a batch put built from a put that has no batch form: each
// message on its own goroutine, as concurrent Puts; it returns once all
// have answered.
func putEach(ctx context.Context, put func(context.Context, *record.Message) (core.PutResult, error), msgs []*record.Message) []core.BatchPut {
	out := make([]core.BatchPut, len(msgs))
	var wg sync.WaitGroup
	for i := range msgs {
		wg.Go(func() { out[i].PutResult, out[i].Err = put(ctx, msgs[i]) })
	}
	wg.Wait()
	return out
}

func (f *funcBackend) Put(ctx context.Context, msg *record.Message) (core.PutResult, error) {
	return f.put(ctx, msg)
}

func TestStreamPut(t *testing.T) {
	b := newFake()
	ss := startStreamServer(t, b, nil)
	p := dialStream(t, ss.addr)
	ctx := context.Background()

	res, err := p.Send(ctx, &client.Message{Topic: "TopicTest", QueueID: 3, Body: []byte("first"), Tags: "tg", Keys: "k1", Properties: map[string]string{"color": "blue"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != client.PutOK || res.Offset != 0 || res.NextOffset != recOverhead+5 || res.Node != ss.addr {
		t.Fatalf("first result %+v", res)
	}
	// One goroutine keeps many puts in flight.
	const n = 500
	fs := make([]*client.Future, n)
	for i := range fs {
		fs[i] = p.SendAsync(&client.Message{Topic: "TopicTest", Body: []byte(fmt.Sprintf("m%04d", i))})
	}
	seen := map[int64]bool{}
	for i, f := range fs {
		r, err := f.Result()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if r.Status != client.PutOK || seen[r.Offset] || r.NextOffset != r.Offset+recOverhead+5 {
			t.Fatalf("message %d: %+v", i, r)
		}
		seen[r.Offset] = true
	}
	if got := b.count(); got != n+1 {
		t.Fatalf("%d records, want %d", got, n+1)
	}
	b.mu.Lock()
	r0 := b.recs[0]
	b.mu.Unlock()
	if r0.QueueID != 3 || r0.Properties[PropertyTags] != "tg" || r0.Properties[PropertyKeys] != "k1" || r0.Properties["color"] != "blue" || !r0.BornHost.IsValid() {
		t.Fatalf("first record %+v", r0)
	}
	// Batches carried several messages.
	if got := testutil.ToFloat64(ss.api.stream.met.batches); got >= n {
		t.Fatalf("%v batches for %d messages: no batching", got, n+1)
	}
	if got := testutil.ToFloat64(ss.api.stream.met.messages.WithLabelValues("PUT_OK")); got != n+1 {
		t.Fatalf("messages_total{PUT_OK} = %v", got)
	}
}

func TestStreamMessageErrors(t *testing.T) {
	b := &funcBackend{fakeBackend: newFake()}
	var mode string
	var mu sync.Mutex
	b.put = func(ctx context.Context, msg *record.Message) (core.PutResult, error) {
		mu.Lock()
		m := mode
		mu.Unlock()
		switch m {
		case "slave":
			return core.PutResult{}, core.ErrSlaveWriteProtected
		case "fenced-stored":
			return core.PutResult{Status: core.FlushSlaveTimeout, Offset: 77, NextOffset: 200}, fmt.Errorf("waiting: %w", core.ErrFenced)
		case "fenced":
			return core.PutResult{}, core.ErrFenced
		case "closed":
			return core.PutResult{}, core.ErrClosed
		case "broken":
			return core.PutResult{}, errors.New("disk on fire")
		}
		return b.fakeBackend.Put(ctx, msg)
	}
	ss := startStreamServer(t, b, func(c *Config) { c.MasterAPI = func() string { return "" } })
	p := dialStream(t, ss.addr, client.WithRetryTimeout(100*time.Millisecond))
	ctx := context.Background()
	check := func(what string, m *client.Message, kind error, st error) {
		t.Helper()
		_, err := p.Send(ctx, m)
		var pe *client.PutError
		if !errors.As(err, &pe) || !errors.Is(err, kind) || !errors.Is(err, st) {
			t.Fatalf("%s: error %v, want %v and %v", what, err, kind, st)
		}
	}
	check("invalid topic", &client.Message{Topic: "bad topic", Body: []byte("x")}, client.ErrInvalidMessage, client.ErrNotStored)
	check("bad queue", &client.Message{Topic: "T", QueueID: MaxQueueID + 1, Body: []byte("x")}, client.ErrInvalidMessage, client.ErrNotStored)
	check("empty body", &client.Message{Topic: "T"}, client.ErrInvalidMessage, client.ErrNotStored)
	check("too large for the node", &client.Message{Topic: "T", Body: make([]byte, 1025)}, client.ErrTooLarge, client.ErrNotStored)
	check("bad property", &client.Message{Topic: "T", Body: []byte("x"), Properties: map[string]string{"a\x01": "b"}}, client.ErrInvalidMessage, client.ErrNotStored)
	if b.count() != 0 {
		t.Fatalf("%d records after refused puts", b.count())
	}
	set := func(m string) { mu.Lock(); mode = m; mu.Unlock() }
	set("fenced-stored")
	check("fenced after storing", &client.Message{Topic: "T", Body: []byte("x")}, client.ErrFenced, client.ErrMayBeStored)
	set("broken")
	check("internal", &client.Message{Topic: "T", Body: []byte("x")}, client.ErrInternal, client.ErrMayBeStored)
	set("slave")
	check("slave", &client.Message{Topic: "T", Body: []byte("x")}, client.ErrNoMaster, client.ErrNotStored)
	set("fenced")
	check("fenced before storing", &client.Message{Topic: "T", Body: []byte("x")}, client.ErrNoMaster, client.ErrNotStored)
	set("closed")
	check("shutting down", &client.Message{Topic: "T", Body: []byte("x")}, client.ErrUnavailable, client.ErrNotStored)
	set("")
	if _, err := p.Send(ctx, &client.Message{Topic: "T", Body: []byte("x")}); err != nil {
		t.Fatalf("after the errors: %v", err)
	}
	if got := testutil.ToFloat64(ss.api.stream.met.messages.WithLabelValues("invalid_message")); got != 4 {
		t.Fatalf("messages_total{invalid_message} = %v", got)
	}
}

// h2c is an HTTP/2 client with prior knowledge, to send raw gRPC frames.
func h2c() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}
}

// grpcFrame frames payload as a gRPC message.
func grpcFrame(payload []byte) []byte {
	b := make([]byte, 5, 5+len(payload))
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

// rawStream posts body to the Put method and returns the decoded results
// and the grpc-status trailer.
func rawStream(t *testing.T, addr string, body io.Reader, hdr map[string]string) (int, []*producerv1.Result, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+StreamPath+"Put", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	hc := h2c()
	// Idle, the connection would hold the server's Shutdown for its
	// polling interval.
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var results []*producerv1.Result
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/grpc") {
		data = nil
	}
	for len(data) >= 5 {
		n := binary.BigEndian.Uint32(data[1:5])
		if int(n) > len(data)-5 {
			t.Fatalf("truncated gRPC frame of %d bytes", n)
		}
		var pr producerv1.PutResponse
		if err := proto.Unmarshal(data[5:5+n], &pr); err != nil {
			t.Fatal(err)
		}
		results = append(results, pr.Results...)
		data = data[5+n:]
	}
	st := resp.Trailer.Get("Grpc-Status")
	if st == "" {
		st = resp.Header.Get("Grpc-Status")
	}
	return resp.StatusCode, results, st, resp.Trailer.Get("Grpc-Message")
}

func batch(seqs ...uint64) []byte {
	req := &producerv1.PutRequest{}
	for _, s := range seqs {
		req.Messages = append(req.Messages, &producerv1.Message{Sequence: s, Topic: "T", Body: []byte("x")})
	}
	b, err := proto.Marshal(req)
	if err != nil {
		panic(err)
	}
	return grpcFrame(b)
}

func TestStreamGarbage(t *testing.T) {
	b := newFake()
	ss := startStreamServer(t, b, nil)
	body := append(batch(1, 2), grpcFrame([]byte{0xff, 0xff, 0xff, 0x0f, 0x01})...)
	code, results, st, msg := rawStream(t, ss.addr, bytes.NewReader(body), nil)
	if code != http.StatusOK || st != "3" || !strings.Contains(msg, "malformed") {
		t.Fatalf("garbage: HTTP %d grpc-status %q %q, want 3 (InvalidArgument)", code, st, msg)
	}
	// The messages before the garbage were stored and answered.
	if len(results) != 2 || b.count() != 2 {
		t.Fatalf("%d results, %d records; want 2 and 2", len(results), b.count())
	}
	if n := len(ss.logs.lines("producer stream closed")); n != 1 {
		t.Fatalf("%d log lines for one malformed stream:\n%s", n, ss.logs.lines(""))
	}
	// The server goes on serving.
	if _, err := dialStream(t, ss.addr).Send(context.Background(), &client.Message{Topic: "T", Body: []byte("y")}); err != nil {
		t.Fatal(err)
	}
}

func TestStreamOversizedBatch(t *testing.T) {
	b := newFake()
	ss := startStreamServer(t, b, nil)
	// A frame that claims 1 GiB: refused from its header, before any
	// allocation of that size.
	hdr := []byte{0, 0x40, 0, 0, 0}
	code, _, st, _ := rawStream(t, ss.addr, io.MultiReader(bytes.NewReader(batch(1)), bytes.NewReader(hdr), strings.NewReader("xxxx")), nil)
	if code != http.StatusOK || st != "8" {
		t.Fatalf("oversized: HTTP %d grpc-status %q, want 8 (ResourceExhausted)", code, st)
	}
	// The handler counts the error as it returns, which may be just after
	// the client read the trailers.
	eventually(t, "errors_total{too_large} to be 1", func() bool {
		return testutil.ToFloat64(ss.api.stream.met.errors.WithLabelValues("too_large")) == 1
	})
}

func TestStreamSequenceMustGrow(t *testing.T) {
	b := newFake()
	ss := startStreamServer(t, b, nil)
	_, results, st, msg := rawStream(t, ss.addr, bytes.NewReader(append(batch(5), batch(5)...)), nil)
	if st != "3" || !strings.Contains(msg, "sequence") {
		t.Fatalf("repeated sequence: grpc-status %q %q", st, msg)
	}
	if len(results) != 1 || results[0].GetSequence() != 5 {
		t.Fatalf("results %v", results)
	}
	_, _, st, _ = rawStream(t, ss.addr, bytes.NewReader(batch(0)), nil)
	if st != "3" {
		t.Fatalf("sequence 0: grpc-status %q", st)
	}
}

func TestStreamNotGRPC(t *testing.T) {
	ss := startStreamServer(t, newFake(), nil)
	resp, err := http.Post("http://"+ss.addr+StreamPath+"Put", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantJSONError(t, "HTTP/1.1 POST", http.StatusUnsupportedMediaType, data)
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("HTTP/1.1 POST: %d", resp.StatusCode)
	}
	code, _, _, _ := rawStream(t, ss.addr, bytes.NewReader(batch(1)), map[string]string{"Grpc-Encoding": "gzip"})
	if code != http.StatusUnsupportedMediaType {
		t.Fatalf("gzip: HTTP %d", code)
	}
}

func TestStreamToken(t *testing.T) {
	b := newFake()
	ss := startStreamServer(t, b, func(c *Config) { c.Token = "s3cret" })
	ctx := context.Background()
	_, err := dialStream(t, ss.addr).Send(ctx, &client.Message{Topic: "T", Body: []byte("x")})
	if !errors.Is(err, client.ErrUnauthenticated) || !errors.Is(err, client.ErrNotStored) {
		t.Fatalf("without a token: %v", err)
	}
	_, err = dialStream(t, ss.addr, client.WithToken("wrong")).Send(ctx, &client.Message{Topic: "T", Body: []byte("x")})
	if !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("wrong token: %v", err)
	}
	if b.count() != 0 {
		t.Fatalf("%d records stored without the token", b.count())
	}
	if _, err := dialStream(t, ss.addr, client.WithToken("s3cret")).Send(ctx, &client.Message{Topic: "T", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(ss.api.authFail.WithLabelValues("missing")); got != 1 {
		t.Fatalf("auth_failures_total{missing} = %v", got)
	}
}

// gateBackend holds every put until release is closed.
type gateBackend struct {
	*fakeBackend
	entered chan struct{}
	release chan struct{}
}

func newGateBackend() *gateBackend {
	return &gateBackend{fakeBackend: newFake(), entered: make(chan struct{}, 1024), release: make(chan struct{})}
}

// PutBatch puts each message concurrently: every put enters the gate.
func (g *gateBackend) PutBatch(ctx context.Context, msgs []*record.Message) []core.BatchPut {
	return putEach(ctx, g.Put, msgs)
}

func (g *gateBackend) Put(ctx context.Context, msg *record.Message) (core.PutResult, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.fakeBackend.Put(ctx, msg)
}

func TestStreamClientGoneMidStream(t *testing.T) {
	b := newGateBackend()
	ss := startStreamServer(t, b, nil)
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequest(http.MethodPost, "http://"+ss.addr+StreamPath+"Put", pr)
		req.Header.Set("Content-Type", "application/grpc")
		if resp, err := h2c().Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	pw.Write(batch(1, 2, 3))
	for range 3 {
		<-b.entered
	}
	// The client vanishes with three puts in flight.
	pw.CloseWithError(errors.New("client gone"))
	<-done
	close(b.release)
	eventually(t, "the stream to end", func() bool { return testutil.ToFloat64(ss.api.stream.met.active) == 0 })
	if b.count() != 3 {
		t.Fatalf("%d records; the puts taken before the client left must complete", b.count())
	}
	if got := testutil.ToFloat64(ss.api.stream.met.inflight); got != 0 {
		t.Fatalf("inflight bytes %v after the stream ended", got)
	}
}

func TestStreamDrainAnswersInFlight(t *testing.T) {
	b := newGateBackend()
	ss := startStreamServer(t, b, nil)
	p := dialStream(t, ss.addr, client.WithRetryTimeout(50*time.Millisecond))
	fs := make([]*client.Future, 5)
	for i := range fs {
		fs[i] = p.SendAsync(&client.Message{Topic: "T", Body: []byte("x")})
	}
	for range fs {
		<-b.entered
	}
	ss.api.Drain()
	close(b.release)
	for i, f := range fs {
		if r, err := f.Result(); err != nil || r.Status != client.PutOK {
			t.Fatalf("message %d: %+v %v", i, r, err)
		}
	}
	eventually(t, "the stream to end", func() bool { return testutil.ToFloat64(ss.api.stream.met.active) == 0 })
	if got := testutil.ToFloat64(ss.api.stream.met.errors.WithLabelValues("shutdown")); got != 1 {
		t.Fatalf("errors_total{shutdown} = %v", got)
	}
}

func TestStreamInflightBound(t *testing.T) {
	b := newGateBackend()
	const limit = 4 << 10
	ss := startStreamServer(t, b, func(c *Config) { c.Stream.InflightBytes = limit })
	p := dialStream(t, ss.addr)
	fs := make([]*client.Future, 40)
	for i := range fs {
		fs[i] = p.SendAsync(&client.Message{Topic: "T", Body: make([]byte, 1000)})
	}
	<-b.entered
	// The stream takes messages up to its bound, then stops reading.
	eventually(t, "the stream to fill its budget", func() bool {
		return testutil.ToFloat64(ss.api.stream.met.inflight) > limit-1200
	})
	if got := testutil.ToFloat64(ss.api.stream.met.inflight); got > limit {
		t.Fatalf("inflight bytes %v over the bound %d", got, limit)
	}
	close(b.release)
	for i, f := range fs {
		if _, err := f.Result(); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}

// TestGatedBody checks, in fake time, that the gate stops reading at its
// window until bytes are consumed.
func TestGatedBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := io.NopCloser(bytes.NewReader(make([]byte, 10000)))
		g := newGatedBody(src, 3000)
		var mu sync.Mutex
		read := 0
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 1024)
			for {
				n, err := g.Read(buf)
				mu.Lock()
				read += n
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
		synctest.Wait()
		mu.Lock()
		if read != 3000 {
			t.Fatalf("read %d before any consume, want the window 3000", read)
		}
		mu.Unlock()
		g.consume(2500)
		synctest.Wait()
		mu.Lock()
		if read != 5500 {
			t.Fatalf("read %d after consuming 2500, want 5500", read)
		}
		mu.Unlock()
		g.Close()
		<-done
	})
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestClientBackPressure: past its in-flight bytes the producer blocks a
// send (here until its context ends: nothing answers), and the message is
// not stored.
func TestClientBackPressure(t *testing.T) {
	b := newGateBackend()
	ss := startStreamServer(t, b, nil)
	p := dialStream(t, ss.addr, client.WithMaxInflightBytes(3000))
	f1 := p.SendAsync(&client.Message{Topic: "T", Body: make([]byte, 1000)})
	f2 := p.SendAsync(&client.Message{Topic: "T", Body: make([]byte, 1000)})
	<-b.entered
	<-b.entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := p.Send(ctx, &client.Message{Topic: "T", Body: make([]byte, 1000)})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, client.ErrNotStored) {
		t.Fatalf("send over the in-flight bound: %v", err)
	}
	close(b.release)
	for _, f := range []*client.Future{f1, f2} {
		if _, err := f.Result(); err != nil {
			t.Fatal(err)
		}
	}
	if b.count() != 2 {
		t.Fatalf("%d records, want 2", b.count())
	}
}

// TestClientCancel: a send cancelled while queued is not stored and never
// leaves; one cancelled after it left may be stored.
func TestClientCancel(t *testing.T) {
	b := newGateBackend()
	ss := startStreamServer(t, b, nil)
	p := dialStream(t, ss.addr, client.WithLinger(time.Hour), client.WithMaxBatch(1<<20, 2))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	// The batch lingers for a second message that never comes.
	_, err := p.Send(ctx, &client.Message{Topic: "T", Body: []byte("queued")})
	if !errors.Is(err, client.ErrNotStored) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled while queued: %v", err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := p.Send(ctx2, &client.Message{Topic: "T", Body: []byte("a")})
		errc <- err
	}()
	f := p.SendAsync(&client.Message{Topic: "T", Body: []byte("b")}) // fills the batch
	<-b.entered
	<-b.entered
	cancel2()
	if err := <-errc; !errors.Is(err, client.ErrMayBeStored) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled after sending: %v", err)
	}
	close(b.release)
	if _, err := f.Result(); err != nil {
		t.Fatal(err)
	}
	if b.count() != 2 {
		t.Fatalf("%d records, want 2 (the queued message must not be stored)", b.count())
	}
}

// TestClientConnectionLost: puts in flight when the server goes away may
// be stored, and say so.
func TestClientConnectionLost(t *testing.T) {
	b := newGateBackend()
	ss := startStreamServer(t, b, nil)
	p := dialStream(t, ss.addr, client.WithRetryTimeout(100*time.Millisecond))
	fs := make([]*client.Future, 3)
	for i := range fs {
		fs[i] = p.SendAsync(&client.Message{Topic: "T", Body: []byte("x")})
	}
	for range fs {
		<-b.entered
	}
	ss.srv.Close() // connections reset, puts still running
	for i, f := range fs {
		_, err := f.Result()
		if !errors.Is(err, client.ErrMayBeStored) || !errors.Is(err, client.ErrUnavailable) {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	close(b.release)
	_, err := p.Send(context.Background(), &client.Message{Topic: "T", Body: []byte("after")})
	if !errors.Is(err, client.ErrNotStored) || !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("with the server gone: %v", err)
	}
	eventually(t, "the stream to end", func() bool { return testutil.ToFloat64(ss.api.stream.met.active) == 0 })
}

// TestStreamIdle: the node announces its idle timeout in a stream's
// headers and ends a stream that sends nothing that long, after answering
// the messages it took. (The client closes idle streams before that:
// client.TestClosesIdleStream.)
func TestStreamIdle(t *testing.T) {
	b := newFake()
	ss := startStreamServer(t, b, func(c *Config) { c.Stream.IdleTimeout = 100 * time.Millisecond })
	body, w := io.Pipe()
	var wg sync.WaitGroup
	wg.Go(func() { w.Write(batch(1)) }) // then nothing, and the body stays open
	defer func() {
		w.Close()
		wg.Wait()
	}()
	req, err := http.NewRequest(http.MethodPost, "http://"+ss.addr+StreamPath+"Put", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	resp, err := h2c().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := resp.Header.Get(producerv1.IdleTimeoutMetadata); got != "100" {
		t.Fatalf("%s header %q, want \"100\"", producerv1.IdleTimeoutMetadata, got)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 5 {
		t.Fatalf("no result before the idle close (%d bytes)", len(data))
	}
	var pr producerv1.PutResponse
	if err := proto.Unmarshal(data[5:], &pr); err != nil {
		t.Fatal(err)
	}
	if len(pr.Results) != 1 || pr.Results[0].GetStorage() != producerv1.Storage_STORAGE_STORED {
		t.Fatalf("results %v, want message 1 stored", pr.Results)
	}
	// gRPC's HTTP handler transport ends the stream itself when the read
	// deadline fires (UNAVAILABLE, "i/o timeout"), before the handler's
	// DEADLINE_EXCEEDED: either way a failed status, never OK.
	if st := resp.Trailer.Get("Grpc-Status"); st == "" || st == strconv.Itoa(int(codes.OK)) {
		t.Fatalf("grpc-status %q after the idle timeout, want an error", st)
	}
	// The handler counts the idle close as it returns, which may be after
	// the client read the trailers.
	eventually(t, "the idle close counted", func() bool {
		return testutil.ToFloat64(ss.api.stream.met.errors.WithLabelValues("idle")) == 1
	})
	if b.count() != 1 {
		t.Fatalf("%d records, want 1", b.count())
	}
}
