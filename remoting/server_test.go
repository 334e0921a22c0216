package remoting

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type testServer struct {
	srv  *Server
	addr string
	reg  *prometheus.Registry
	logs *syncBuffer
	done chan error
}

// echoHandler answers code 21 with the request's body and ext fields,
// anything else with REQUEST_CODE_NOT_SUPPORTED.
func echoHandler(_ context.Context, req *Command) *Command {
	if req.Code != GetAllTopicConfig {
		return NewResponse(req, RequestCodeNotSupported, NotSupportedRemark(req.Code))
	}
	r := NewResponse(req, Success, "")
	r.Body = append([]byte("echo:"), req.Body...)
	r.ExtFields = req.ExtFields
	return r
}

func startServer(t *testing.T, cfg ServerConfig) *testServer {
	t.Helper()
	ts := &testServer{reg: prometheus.NewRegistry(), logs: &syncBuffer{}, done: make(chan error, 1)}
	if cfg.Handler == nil {
		cfg.Handler = HandlerFunc(echoHandler)
	}
	cfg.Registerer = ts.reg
	cfg.MetricCodes = []int32{GetAllTopicConfig}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: ts.logs, Level: hclog.Debug})
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.srv, ts.addr = srv, ln.Addr().String()
	go func() { ts.done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-ts.done; !errors.Is(err, ErrClosed) {
			t.Errorf("Serve returned %v, want ErrClosed", err)
		}
	})
	return ts
}

func dialClient(t *testing.T, addr string) *Client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cl := NewClient(c, 0)
	t.Cleanup(func() { cl.Close() })
	return cl
}

func TestClientServer(t *testing.T) {
	ts := startServer(t, ServerConfig{})
	for _, st := range []SerializeType{JSON, ROCKETMQ} {
		cl := dialClient(t, ts.addr)
		for i := range 3 {
			resp, err := cl.Invoke(context.Background(), &Command{Code: GetAllTopicConfig, Language: LanguageGo, Serialize: st, Body: []byte("hi"), ExtFields: map[string]string{"topicSeq": "0"}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Code != Success || string(resp.Body) != "echo:hi" || resp.Opaque != int32(i+1) || resp.Serialize != st || resp.ExtFields["topicSeq"] != "0" {
				t.Fatalf("%v: response %+v", st, resp)
			}
		}
		// A oneway request gets no answer: the next call's answer is its own.
		if r, err := cl.Invoke(context.Background(), &Command{Code: GetAllTopicConfig, Flag: FlagOneway, Serialize: st}); r != nil || err != nil {
			t.Fatalf("oneway: %+v, %v", r, err)
		}
		resp, err := cl.Invoke(context.Background(), &Command{Code: 999, Serialize: st})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Code != RequestCodeNotSupported || resp.Remark != " request type 999 not supported" || resp.Opaque != 5 {
			t.Fatalf("unsupported: %+v", resp)
		}
	}
	if got := testutil.ToFloat64(ts.srv.metrics.requests.WithLabelValues("21")); got != 8 {
		t.Errorf("requests{code=21} = %v, want 8", got)
	}
	if got := testutil.ToFloat64(ts.srv.metrics.requests.WithLabelValues("other")); got != 2 {
		t.Errorf("requests{code=other} = %v, want 2", got)
	}
}

// TestServerClosesOnBadInput: each bad stream closes its connection (the
// server reads EOF-free garbage, answers nothing) with one log line and a
// count by reason; the server keeps serving others.
func TestServerClosesOnBadInput(t *testing.T) {
	ts := startServer(t, ServerConfig{MaxFrameSize: 4096})
	cases := []struct {
		name, reason, logText string
		data                  []byte
	}{
		{"unknown serialize type", ReasonMalformed, "malformed remoting frame", unhex(t, "00000004 05000000")},
		{"bad JSON header", ReasonMalformed, "malformed remoting frame", unhex(t, "00000006 00000002 7b7b")},
		{"frame over the bound", ReasonTooLarge, "over the size bound", unhex(t, "00100000")},
		{"negative length", ReasonMalformed, "malformed remoting frame", unhex(t, "80000000")},
		{"cut inside a frame", ReasonTruncated, "ended inside a frame", unhex(t, "00000100 0100")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := strings.Count(ts.logs.String(), tc.logText)
			c, err := net.Dial("tcp", ts.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(tc.data); err != nil {
				t.Fatal(err)
			}
			if tc.reason == ReasonTruncated {
				c.(*net.TCPConn).CloseWrite()
			}
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			n, err := c.Read(make([]byte, 1))
			if n != 0 || (err != io.EOF && !isReset(err)) {
				t.Fatalf("read after bad input: %d, %v; want the server to close", n, err)
			}
			waitFor(t, func() bool { return testutil.ToFloat64(ts.srv.metrics.errors.WithLabelValues(tc.reason)) >= 1 })
			waitFor(t, func() bool { return strings.Count(ts.logs.String(), tc.logText) == before+1 })
		})
	}
	cl := dialClient(t, ts.addr)
	if resp, err := cl.Invoke(context.Background(), &Command{Code: GetAllTopicConfig, Serialize: JSON}); err != nil || resp.Code != Success {
		t.Fatalf("after bad peers: %+v, %v", resp, err)
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// waitFor polls a condition the server's goroutines make true (real TCP:
// a deadline, no fixed sleep).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestServerIdleTimeout(t *testing.T) {
	ts := startServer(t, ServerConfig{IdleTimeout: 50 * time.Millisecond})
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("idle connection: read %d, %v", n, err)
	}
	waitFor(t, func() bool { return testutil.ToFloat64(ts.srv.metrics.errors.WithLabelValues(ReasonIdle)) == 1 })
	// The gauge drops when the connection's goroutine ends, just after.
	waitFor(t, func() bool { return testutil.ToFloat64(ts.srv.metrics.open) == 0 })
}

// TestServerCloseEndsConnections: Close returns with connections open and a
// handler blocked on its ctx.
func TestServerCloseEndsConnections(t *testing.T) {
	entered := make(chan struct{})
	ts := startServer(t, ServerConfig{Handler: HandlerFunc(func(ctx context.Context, req *Command) *Command {
		close(entered)
		<-ctx.Done()
		return nil
	})})
	cl := dialClient(t, ts.addr)
	errc := make(chan error, 1)
	go func() {
		_, err := cl.Invoke(context.Background(), &Command{Code: 1, Serialize: JSON})
		errc <- err
	}()
	<-entered
	idle := dialClient(t, ts.addr)
	_ = idle
	if err := ts.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil {
		t.Fatal("call survived the server's Close")
	}
}

// TestClientContext: a call ends at its ctx, and the client then refuses.
func TestClientContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	cl := dialClient(t, ln.Addr().String())
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cl.Invoke(ctx, &Command{Code: 1, Serialize: JSON})
		errc <- err
	}()
	peer := <-accepted
	defer peer.Close()
	// The request arrives; the silent peer never answers.
	if _, err := NewReader(peer, 0).Read(); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Invoke after cancel: %v, want context.Canceled", err)
	}
	cl.Close()
	if _, err := cl.Invoke(context.Background(), &Command{Code: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Invoke after Close: %v", err)
	}
}

// TestClientSkipsStaleResponses: a response to another opaque (a call
// abandoned earlier) is skipped.
func TestClientSkipsStaleResponses(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	cl := NewClient(a, 0)
	defer cl.Close()
	go func() {
		r := NewReader(b, 0)
		req, err := r.Read()
		if err != nil {
			return
		}
		stale := NewResponse(req, Success, "stale")
		stale.Opaque = req.Opaque - 1
		_ = WriteCommand(b, stale)
		_ = WriteCommand(b, NewResponse(req, Success, "fresh"))
	}()
	resp, err := cl.Invoke(context.Background(), &Command{Code: 21, Serialize: ROCKETMQ})
	if err != nil || resp.Remark != "fresh" {
		t.Fatalf("%+v, %v", resp, err)
	}
}

// TestServerTrickleTimeout: a frame trickled a byte at a time does not
// keep the connection past IdleTimeout: the deadline covers the whole frame.
func TestServerTrickleTimeout(t *testing.T) {
	ts := startServer(t, ServerConfig{IdleTimeout: 200 * time.Millisecond})
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frame, _ := AppendFrame(nil, &Command{Code: GetAllTopicConfig, Serialize: JSON, Body: make([]byte, 1000)})
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		c.Read(make([]byte, 1))
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < len(frame); i++ {
		select {
		case <-closed:
			if d := time.Since(start); d > 30*time.Second {
				t.Fatalf("closed only after %v", d)
			}
			waitFor(t, func() bool { return testutil.ToFloat64(ts.srv.metrics.errors.WithLabelValues(ReasonIdle)) == 1 })
			if i >= len(frame)-1 {
				t.Fatalf("the whole frame went through (%d bytes) before the close", i)
			}
			return
		case <-tick.C:
		}
		if _, err := c.Write(frame[i : i+1]); err != nil {
			<-closed
			waitFor(t, func() bool { return testutil.ToFloat64(ts.srv.metrics.errors.WithLabelValues(ReasonIdle)) == 1 })
			return
		}
	}
	t.Fatal("the server answered a frame trickled over far more than IdleTimeout")
}
