package api

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/replicatorhq/replicator/client"
	"github.com/replicatorhq/replicator/internal/node/testpki"
	"github.com/replicatorhq/replicator/sdk/proto/producerv1"
)

// portServer is an API Port on a real loopback listener, behind the
// connection limit listener as a node serves it.
type portServer struct {
	api  *Server
	addr string
	reg  *prometheus.Registry
	logs *lockedBuf
	ca   *testpki.CA // nil: cleartext
	// skew moves the connection limit listener's clock on.
	skew atomic.Int64
}

func startPort(t *testing.T, b Backend, tlsOn bool, mod func(*Config), lim func(*ServerLimits)) *portServer {
	t.Helper()
	ps := &portServer{reg: prometheus.NewRegistry(), logs: &lockedBuf{}}
	cfg := Config{Backend: b, Registerer: ps.reg, Gatherer: ps.reg, MaxBodyBytes: 1024,
		Logger: hclog.New(&hclog.LoggerOptions{Output: ps.logs, Level: hclog.Debug})}
	if mod != nil {
		mod(&cfg)
	}
	var err error
	if ps.api, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	l := DefaultServerLimits(time.Second)
	if lim != nil {
		lim(&l)
	}
	var tlsCfg *tls.Config
	if tlsOn {
		ps.ca = testpki.NewCA(t, "test CA")
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{ps.ca.Server(t, "node").TLS}}
	}
	port, err := ps.api.NewPort(l, tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ps.addr = ln.Addr().String()
	lln, err := LimitListenerPerIP(ln, l.MaxConns, l.MaxConnsPerIP, cfg.Logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	lln.(*limitListener).now = func() time.Time { return time.Now().Add(time.Duration(ps.skew.Load())) }
	done := make(chan error, 1)
	go func() { done <- port.Serve(lln) }()
	t.Cleanup(func() {
		ps.api.Drain()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := port.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
			port.Close()
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return ps
}

// clientTLS trusts the port's CA and offers protos.
func (ps *portServer) clientTLS(protos ...string) *tls.Config {
	return &tls.Config{RootCAs: ps.ca.Pool, ServerName: "localhost", NextProtos: protos}
}

func (ps *portServer) url() string {
	if ps.ca != nil {
		return "https://" + ps.addr
	}
	return "http://" + ps.addr
}

// nativeStreams counts the streams the native transport served.
func (ps *portServer) nativeStreams() int {
	return len(ps.logs.lines("transport=grpc"))
}

// rawPut opens a Put stream with grpc-go itself (creds, and the token when
// not empty), sends one batch and returns the result or the stream's error.
func rawPut(t *testing.T, addr string, creds credentials.TransportCredentials, token string) (*producerv1.Result, error) {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	st, err := producerv1.NewProducerClient(cc).Put(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(&producerv1.PutRequest{Messages: []*producerv1.Message{{Sequence: 1, Topic: "T", Body: []byte("x")}}}); err != nil {
		_, err = st.Recv()
		return nil, err
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	resp, err := st.Recv()
	if err != nil {
		return nil, err
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the result: %v, want the end of the stream", err)
	}
	return resp.GetResults()[0], nil
}

func statusOver(t *testing.T, hc *http.Client, url string) (code, protoMajor int) {
	t.Helper()
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(url + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.ProtoMajor
}

func sendOne(t *testing.T, url string, opts ...client.Option) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := client.Dial(ctx, []string{url}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = p.Send(ctx, &client.Message{Topic: "T", Body: []byte("x")})
	return err
}

// TestPortCleartext: on one cleartext port, gRPC (prior-knowledge HTTP/2)
// goes to the native transport and HTTP/1.1 to the JSON API; a JSON
// request over prior-knowledge HTTP/2 reaches gRPC, which refuses it.
func TestPortCleartext(t *testing.T) {
	b := newFake()
	ps := startPort(t, b, false, nil, nil)
	if err := sendOne(t, ps.url()); err != nil {
		t.Fatal(err)
	}
	if r, err := rawPut(t, ps.addr, insecure.NewCredentials(), ""); err != nil || r.GetStorage() != producerv1.Storage_STORAGE_STORED {
		t.Fatalf("raw gRPC put: %v, %v", r, err)
	}
	if b.count() != 2 {
		t.Fatalf("%d records, want 2", b.count())
	}
	if n := ps.nativeStreams(); n != 2 {
		t.Fatalf("%d streams on the native transport, want 2", n)
	}
	if code, major := statusOver(t, &http.Client{Timeout: 10 * time.Second}, ps.url()); code != 200 || major != 1 {
		t.Fatalf("HTTP/1.1 status: %d over HTTP/%d", code, major)
	}
	code, _ := statusOver(t, h2c(), ps.url())
	if code != http.StatusUnsupportedMediaType {
		t.Fatalf("JSON over prior-knowledge HTTP/2: %d, want gRPC's 415", code)
	}
	if got := testutil.ToFloat64(ps.api.reqs.WithLabelValues("stream", "200")); got != 2 {
		t.Fatalf("requests_total{stream,200} = %v, want 2", got)
	}
}

// TestPortTLS: on one TLS port, the client's ALPN id goes to the native
// transport, an older gRPC client (ALPN h2) to grpc.Server.ServeHTTP, and
// JSON requests over HTTP/2 and HTTP/1.1 to the API.
func TestPortTLS(t *testing.T) {
	b := newFake()
	ps := startPort(t, b, true, nil, nil)
	if err := sendOne(t, ps.url(), client.WithTLS(ps.clientTLS())); err != nil {
		t.Fatal(err)
	}
	if n := ps.nativeStreams(); n != 1 {
		t.Fatalf("%d streams on the native transport, want 1", n)
	}
	// grpc-go's own TLS credentials offer h2 only: the fallback path.
	r, err := rawPut(t, ps.addr, credentials.NewTLS(ps.clientTLS()), "")
	if err != nil || r.GetStorage() != producerv1.Storage_STORAGE_STORED {
		t.Fatalf("h2 gRPC put: %v, %v", r, err)
	}
	if n := ps.nativeStreams(); n != 1 {
		t.Fatalf("the h2 stream went to the native transport (%d streams there)", n)
	}
	if len(ps.logs.lines("path=/replicator.producer.v1.Producer/Put code=200")) == 0 {
		t.Fatalf("no request line of the http.Server's stream:\n%s", strings.Join(ps.logs.lines("request"), "\n"))
	}
	if b.count() != 2 {
		t.Fatalf("%d records, want 2", b.count())
	}
	h2 := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: ps.clientTLS(), ForceAttemptHTTP2: true}}
	if code, major := statusOver(t, h2, ps.url()); code != 200 || major != 2 {
		t.Fatalf("TLS h2 status: %d over HTTP/%d", code, major)
	}
	var h1p http.Protocols
	h1p.SetHTTP1(true)
	h1 := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: ps.clientTLS(), Protocols: &h1p}}
	if code, major := statusOver(t, h1, ps.url()); code != 200 || major != 1 {
		t.Fatalf("TLS HTTP/1.1 status: %d over HTTP/%d", code, major)
	}
}

// TestPortToken: a missing or wrong token is refused on both gRPC paths
// with Unauthenticated, counted and logged as for the JSON routes.
func TestPortToken(t *testing.T) {
	b := newFake()
	ps := startPort(t, b, true, func(c *Config) { c.Token = "s3cret" }, nil)
	native := credentials.NewTLS(ps.clientTLS(producerv1.ALPNProtocol))
	fallback := credentials.NewTLS(ps.clientTLS())
	for _, tc := range []struct {
		name   string
		creds  credentials.TransportCredentials
		token  string
		reason string
	}{
		{"native, no token", native, "", "missing"},
		{"native, wrong token", native, "wrong", "invalid"},
		{"h2, no token", fallback, "", "missing"},
		{"h2, wrong token", fallback, "wrong", "invalid"},
	} {
		before := testutil.ToFloat64(ps.api.authFail.WithLabelValues(tc.reason))
		_, err := rawPut(t, ps.addr, tc.creds, tc.token)
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("%s: %v, want Unauthenticated", tc.name, err)
		}
		if got := testutil.ToFloat64(ps.api.authFail.WithLabelValues(tc.reason)); got != before+1 {
			t.Fatalf("%s: auth_failures_total{%s} = %v, want %v", tc.name, tc.reason, got, before+1)
		}
	}
	if b.count() != 0 {
		t.Fatalf("%d records stored without the token", b.count())
	}
	if n := len(ps.logs.lines("unauthorized request")); n != 4 {
		t.Fatalf("%d unauthorized request lines, want 4", n)
	}
	if got := testutil.ToFloat64(ps.api.reqs.WithLabelValues("stream", "401")); got != 4 {
		t.Fatalf("requests_total{stream,401} = %v, want 4", got)
	}
	if err := sendOne(t, ps.url(), client.WithTLS(ps.clientTLS()), client.WithToken("s3cret")); err != nil {
		t.Fatal(err)
	}
	if err := sendOne(t, ps.url(), client.WithTLS(ps.clientTLS()), client.WithToken("bad")); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("client with a wrong token: %v", err)
	}
}

// waitClosed reads from c until the server closes it, within limit.
func waitClosed(t *testing.T, c net.Conn, limit time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(limit))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %v", limit)
	}
}

// TestPortBadConnections: garbage after the preface, a partial preface,
// and a connection silent after the preface (or after the TLS handshake)
// are closed within the header timeout, the gRPC ones with a log line.
func TestPortBadConnections(t *testing.T) {
	short := func(l *ServerLimits) { l.ReadHeaderTimeout = 200 * time.Millisecond }
	for _, tlsOn := range []bool{false, true} {
		ps := startPort(t, newFake(), tlsOn, nil, short)
		dial := func() net.Conn {
			c, err := net.Dial("tcp", ps.addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			if !tlsOn {
				return c
			}
			tc := tls.Client(c, ps.clientTLS(producerv1.ALPNProtocol))
			if err := tc.Handshake(); err != nil {
				t.Fatal(err)
			}
			if p := tc.ConnectionState().NegotiatedProtocol; p != producerv1.ALPNProtocol {
				t.Fatalf("negotiated %q", p)
			}
			return tc
		}
		garbage := dial()
		if _, err := garbage.Write([]byte(http2Preface + "\x00\x00\x01\x99garbage that is no frame")); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, garbage, 10*time.Second)
		silent := dial()
		if !tlsOn {
			silent.Write([]byte(http2Preface))
		}
		waitClosed(t, silent, 10*time.Second)
		if !tlsOn {
			partial := dial()
			partial.Write([]byte(http2Preface[:10]))
			waitClosed(t, partial, 10*time.Second)
		}
		eventually(t, "log lines of the closed connections", func() bool {
			return len(ps.logs.lines("opened no gRPC stream")) == 2
		})
	}
}

// openPut opens a Put stream on a cleartext port with grpc-go itself.
func openPut(t *testing.T, addr string, opts ...grpc.DialOption) producerv1.Producer_PutClient {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	st, err := producerv1.NewProducerClient(cc).Put(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestPortIdleStream: the native transport has no read deadline: the
// stream still announces its idle timeout and ends (DEADLINE_EXCEEDED)
// after it, having answered what it took.
func TestPortIdleStream(t *testing.T) {
	ps := startPort(t, newFake(), false, func(c *Config) { c.Stream.IdleTimeout = 100 * time.Millisecond }, nil)
	st := openPut(t, ps.addr)
	if err := st.Send(&producerv1.PutRequest{Messages: []*producerv1.Message{{Sequence: 1, Topic: "T", Body: []byte("x")}}}); err != nil {
		t.Fatal(err)
	}
	md, err := st.Header()
	if err != nil || strings.Join(md.Get(producerv1.IdleTimeoutMetadata), ",") != "100" {
		t.Fatalf("headers %v, %v", md, err)
	}
	resp, err := st.Recv()
	if err != nil || resp.GetResults()[0].GetStorage() != producerv1.Storage_STORAGE_STORED {
		t.Fatalf("result %v, %v", resp, err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("after the idle timeout: %v, want DeadlineExceeded", err)
	}
	if n := testutil.ToFloat64(ps.api.stream.met.errors.WithLabelValues("idle")); n != 1 {
		t.Fatalf("idle stream errors %v, want 1", n)
	}
}

// TestPortConnectionLimit: a gRPC connection is busy for the connection
// limit (never closed to make room), and a new one at the limit is closed.
func TestPortConnectionLimit(t *testing.T) {
	b := newGateBackend()
	ps := startPort(t, b, false, nil, func(l *ServerLimits) { l.MaxConnsPerIP = 1 })
	defer close(b.release)
	p := dialStream(t, ps.addr)
	f := p.SendAsync(&client.Message{Topic: "T", Body: []byte("x")})
	<-b.entered
	// Past newGrace: a connection still new (no request) would be closed
	// to make room.
	ps.skew.Store(int64(time.Hour))
	c, err := net.Dial("tcp", ps.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitClosed(t, c, 10*time.Second)
	b.release <- struct{}{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.Wait(ctx); err != nil {
		t.Fatalf("the stream's put after a refused connection: %v", err)
	}
}

// TestPortWriteTimeout: gRPC's transport has no write deadline: a client
// that stops reading its results loses its connection after the write
// timeout, with a log line.
func TestPortWriteTimeout(t *testing.T) {
	ps := startPort(t, newFake(), false, func(c *Config) { c.Stream.WriteTimeout = 100 * time.Millisecond }, nil)
	// A fixed window (no BDP growth): results stop flowing once it is full.
	st := openPut(t, ps.addr, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	// Messages refused at once (an empty topic): no put, and results of
	// some 60 bytes, well past the client's window and gRPC's write quota.
	seq := uint64(0)
	for range 2 {
		req := &producerv1.PutRequest{}
		for range DefaultStreamBatchMessages {
			seq++
			req.Messages = append(req.Messages, &producerv1.Message{Sequence: seq, Body: []byte("x")})
		}
		if err := st.Send(req); err != nil {
			break // the node closed the connection
		}
	}
	// Results are not read: the node's sends block on flow control.
	eventually(t, "the write timeout's log line", func() bool {
		return len(ps.logs.lines("read no results for the write timeout")) == 1
	})
	for {
		if _, err := st.Recv(); err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("stream after the write timeout: %v, want Unavailable", err)
			}
			break
		}
	}
}
