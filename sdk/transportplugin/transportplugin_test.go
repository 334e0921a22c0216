package transportplugin_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"

	"go.uber.org/goleak"

	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/transportplugin"
	"github.com/replicatorhq/replicator/sdk/transportplugin/transportplugintest"
	"github.com/replicatorhq/replicator/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openTCP(context.Context, transportplugin.OpenRequest) (transport.Transport, error) {
	return tcptransport.New(tcptransport.DefaultOptions()), nil
}

// The TCP transport across the plugin boundary passes the transport
// conformance suite: the host's connections are real *net.TCPConn.
func TestPluginTransportConformance(t *testing.T) {
	transportplugintest.Run(t, openTCP)
}

// The host receives kernel sockets: *net.TCPConn on both ends, so the
// framing's vectored writes stay writev.
func TestPluginTransportHandsOverSockets(t *testing.T) {
	cl := transportplugintest.Serve(t, openTCP, nil)
	ln, err := cl.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, ok := ln.Addr().(*net.TCPAddr); !ok {
		t.Fatalf("listener address %T, want *net.TCPAddr", ln.Addr())
	}
	c, err := cl.Dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, conn := range []net.Conn{c, s} {
		if _, ok := conn.(*net.TCPConn); !ok {
			t.Fatalf("connection %T, want *net.TCPConn", conn)
		}
	}
}

// A transport whose connections keep state in the plugin (TLS) cannot hand
// them over: Dial fails with ErrNoHandoff, nothing leaks.
func TestPluginTransportRefusesTLS(t *testing.T) {
	plain := transportplugintest.Serve(t, openTCP, nil)
	ln, err := plain.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accept and drop, so the TLS client's handshake fails fast
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	cl := transportplugintest.Serve(t, func(context.Context, transportplugin.OpenRequest) (transport.Transport, error) {
		return tlsDialer{}, nil
	}, nil)
	_, err = cl.Dial(context.Background(), ln.Addr().String())
	if !errors.Is(err, transportplugin.ErrNoHandoff) {
		t.Fatalf("Dial of a TLS transport: %v, want ErrNoHandoff", err)
	}
}

// tlsDialer returns a *tls.Conn without a handshake (enough to be refused).
type tlsDialer struct{}

func (tlsDialer) Listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
func (tlsDialer) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return tls.Client(c, &tls.Config{InsecureSkipVerify: true}), nil
}
