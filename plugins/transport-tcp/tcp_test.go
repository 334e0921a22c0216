package tcptransport

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/transport"
	"github.com/replicatorhq/replicator/transport/transporttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestTCPConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transport.Transport { return New(DefaultOptions()) })
}

func TestTCPConformanceTLS(t *testing.T) {
	pki := newPKI(t)
	transporttest.Run(t, func(t *testing.T) transport.Transport {
		return New(Options{Security: transport.Security{ServerTLS: pki.serverConfig(false), ClientTLS: pki.clientConfig(false)}})
	})
}

// pair listens and dials, returning the dialed and the accepted ends.
func pair(t *testing.T, srv, cli *Transport) (dialed, accepted net.Conn) {
	t.Helper()
	ln, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dialed, err = cli.Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		dialed.Close()
		t.Fatal(r.err)
	}
	t.Cleanup(func() { dialed.Close(); r.c.Close() })
	return dialed, r.c
}

// replicate runs one classic HA exchange over c (slave) and s (master):
// request report, frames with a heartbeat, ack.
func replicate(t *testing.T, slave, master net.Conn) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		rr := transport.NewReportReader(master)
		req, err := rr.Next()
		if err != nil || req != 1000 {
			done <- errors.Join(err, errors.New("bad request"))
			return
		}
		fw := transport.NewFrameWriter(master)
		body := bytes.Repeat([]byte("rocketmq"), 4096) // 32 KiB
		if err := fw.WriteFrame(1000, body); err != nil {
			done <- err
			return
		}
		if err := fw.WriteFrame(1000+int64(len(body)), nil); err != nil {
			done <- err
			return
		}
		ack, err := rr.Next()
		if err == nil && ack != 1000+int64(len(body)) {
			err = errors.New("bad ack")
		}
		done <- err
	}()
	rw := transport.NewReportWriter(slave)
	if err := rw.WriteReport(1000); err != nil {
		t.Fatal(err)
	}
	fr := transport.NewFrameReader(slave, transport.DefaultBatchSize)
	f, err := fr.Next()
	if err != nil || f.Offset != 1000 || len(f.Body) != 32<<10 || !bytes.HasPrefix(f.Body, []byte("rocketmq")) {
		t.Fatalf("data frame: %v %v", f.Offset, err)
	}
	end := f.End()
	if hb, err := fr.Next(); err != nil || !hb.IsHeartbeat() || hb.Offset != end {
		t.Fatalf("heartbeat: %+v %v", hb, err)
	}
	if err := rw.WriteReport(end); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestTCPReplicationBytes(t *testing.T) {
	tr := New(DefaultOptions())
	c, s := pair(t, tr, tr)
	replicate(t, c, s)
}

// A server that accepts TCP but never answers the TLS handshake: the dial
// must end at the ctx deadline, or at ConnectTimeout.
func TestTCPDialHonoursDeadline(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := raw.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	defer func() {
		raw.Close()
		for c := range accepted {
			c.Close()
		}
	}()
	pki := newPKI(t)

	tr := New(Options{Security: transport.Security{ClientTLS: pki.clientConfig(false)}})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = tr.Dial(ctx, raw.Addr().String())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ctx deadline: %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("dial took %v", el)
	}

	tr = New(Options{Security: transport.Security{ClientTLS: pki.clientConfig(false)}, ConnectTimeout: 50 * time.Millisecond})
	if _, err = tr.Dial(context.Background(), raw.Addr().String()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ConnectTimeout: %v", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if _, err = New(DefaultOptions()).Dial(ctx, raw.Addr().String()); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
}

func TestTCPDialRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = New(DefaultOptions()).Dial(context.Background(), addr)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("got %v, want ECONNREFUSED", err)
	}
}

func TestTCPListenErrors(t *testing.T) {
	tr := New(DefaultOptions())
	ln, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Listen(ln.Addr().String()); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second listen: %v", err)
	}
	ln.Close()
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("accept after close: %v", err)
	}
	if _, err := tr.Listen("not an address"); err == nil {
		t.Fatal("bad address accepted")
	}
}

func TestTCPTLS(t *testing.T) {
	pki := newPKI(t)
	t.Run("replication inside TLS", func(t *testing.T) {
		srv := New(Options{Security: transport.Security{ServerTLS: pki.serverConfig(false)}})
		cli := New(Options{Security: transport.Security{ClientTLS: pki.clientConfig(false)}})
		c, s := pair(t, srv, cli)
		if _, ok := c.(*tls.Conn); !ok {
			t.Fatalf("dialed %T, want *tls.Conn", c)
		}
		replicate(t, c, s)
	})
	t.Run("mutual TLS", func(t *testing.T) {
		srv := New(Options{Security: transport.Security{ServerTLS: pki.serverConfig(true)}})
		cli := New(Options{Security: transport.Security{ClientTLS: pki.clientConfig(true)}})
		c, s := pair(t, srv, cli)
		replicate(t, c, s)
		st := s.(*tls.Conn).ConnectionState()
		if len(st.PeerCertificates) == 0 || st.PeerCertificates[0].Subject.CommonName != "slave" {
			t.Fatalf("client certificate not seen: %+v", st.PeerCertificates)
		}
	})
	t.Run("untrusted server", func(t *testing.T) {
		srv := New(Options{Security: transport.Security{ServerTLS: pki.serverConfig(false)}})
		ln, err := srv.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				c.Read(make([]byte, 1)) // runs the server handshake
				c.Close()
			}
		}()
		cli := New(Options{Security: transport.Security{ClientTLS: &tls.Config{MinVersion: tls.VersionTLS12}}})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = cli.Dial(ctx, ln.Addr().String())
		var uae x509.UnknownAuthorityError
		if !errors.As(err, &uae) {
			t.Fatalf("got %v, want an unknown-authority error", err)
		}
	})
	t.Run("plain slave to TLS master", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		srv := New(Options{Security: transport.Security{ServerTLS: pki.serverConfig(false)}, Registerer: reg})
		ln, err := srv.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		accepted := make(chan error, 1)
		go func() {
			c, err := ln.Accept() // only returns when the listener closes
			if err == nil {
				c.Close()
			}
			accepted <- err
		}()
		c, err := New(DefaultOptions()).Dial(context.Background(), ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := transport.NewReportWriter(c).WriteReport(0); err != nil {
			t.Fatal(err)
		}
		// The master answers a TLS alert, or just closes: never frames.
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, rerr := io.ReadAll(c)
		if errors.Is(rerr, os.ErrDeadlineExceeded) {
			t.Fatal("TLS master kept a plain connection open")
		}
		ln.Close()
		if err := <-accepted; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept returned %v for a failed handshake", err)
		}
		if n := testutil.ToFloat64(srv.handshakeErr); n != 1 {
			t.Fatalf("handshake errors counted: %v", n)
		}
	})
}

func TestTCPMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	tr := New(Options{Registerer: reg})
	New(Options{Registerer: reg}) // a second transport on the same registry shares the counters
	c, _ := pair(t, tr, tr)
	c.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	tr.Dial(context.Background(), addr)
	want := `
# HELP replicator_transport_tcp_accepts_total HA connections accepted.
# TYPE replicator_transport_tcp_accepts_total counter
replicator_transport_tcp_accepts_total 1
# HELP replicator_transport_tcp_dials_total HA connections dialed, by result.
# TYPE replicator_transport_tcp_dials_total counter
replicator_transport_tcp_dials_total{result="error"} 1
replicator_transport_tcp_dials_total{result="ok"} 1
`
	if err := testutil.GatherAndCompare(reg, bytes.NewBufferString(want), "replicator_transport_tcp_accepts_total", "replicator_transport_tcp_dials_total"); err != nil {
		t.Fatal(err)
	}
}

func TestTCPOptions(t *testing.T) {
	if err := DefaultOptions().Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Options{SendBufferSize: -1}).Validate(); err == nil {
		t.Fatal("negative buffer accepted")
	}
	if err := (Options{Security: transport.Security{ServerTLS: &tls.Config{}}}).Validate(); err == nil {
		t.Fatal("ServerTLS without certificate accepted")
	}
	o := New(Options{ReceiveBufferSize: -5}).Options()
	if o.ReceiveBufferSize != 0 || o.ConnectTimeout != DefaultConnectTimeout || o.KeepAlive != DefaultKeepAlive {
		t.Fatalf("effective options %+v", o)
	}
}

// pki is a CA, a server certificate for 127.0.0.1 and a client certificate,
// all generated in the test.
type pki struct {
	pool   *x509.CertPool
	server tls.Certificate
	client tls.Certificate
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "replicator test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage) tls.Certificate {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	p := &pki{pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.server = leaf(2, "master", x509.ExtKeyUsageServerAuth)
	p.client = leaf(3, "slave", x509.ExtKeyUsageClientAuth)
	return p
}

func (p *pki) serverConfig(mutual bool) *tls.Config {
	c := &tls.Config{Certificates: []tls.Certificate{p.server}, MinVersion: tls.VersionTLS12}
	if mutual {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = p.pool
	}
	return c
}

func (p *pki) clientConfig(mutual bool) *tls.Config {
	c := &tls.Config{RootCAs: p.pool, MinVersion: tls.VersionTLS12}
	if mutual {
		c.Certificates = []tls.Certificate{p.client}
	}
	return c
}

// TestDeadlineErr: a connect that failed on the socket's deadline reports
// context.DeadlineExceeded once ctx's deadline has passed (the socket's
// deadline can fire before ctx's timer), and is left alone otherwise.
func TestDeadlineErr(t *testing.T) {
	sockErr := &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if err := deadlineErr(past, sockErr); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("past deadline: %v, want both context.DeadlineExceeded and os.ErrDeadlineExceeded", err)
	}
	future, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	defer cancel2()
	if err := deadlineErr(future, sockErr); err != sockErr {
		t.Fatalf("future deadline: %v, want the error unchanged", err)
	}
	if err := deadlineErr(past, syscall.ECONNREFUSED); err != syscall.ECONNREFUSED {
		t.Fatalf("refused: %v, want the error unchanged", err)
	}
}
