package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/transportplugin"
	"github.com/replicatorhq/replicator/sdk/transportplugin/transportplugintest"
)

// TestMain doubles as the plugin binary of the benchmarks: started through
// a symlink named replicator-transport-tcp it serves the transport.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "replicator-transport-tcp" {
		main()
		return
	}
	goleak.VerifyTestMain(m)
}

// The plugin's transport, across the plugin boundary, passes the transport
// conformance suite.
func TestPluginTCPConformance(t *testing.T) { transportplugintest.Run(t, open) }

func TestPluginTCPOptions(t *testing.T) {
	tr, err := open(context.Background(), transportplugin.OpenRequest{Options: map[string]string{
		"connect_timeout": "2s", "keepalive": "30s", "no_delay": "false", "send_buffer": "65536", "receive_buffer": "131072",
		"allow": "127.0.0.1,10.0.0.0/8",
	}})
	if err != nil {
		t.Fatal(err)
	}
	o := tr.(*tcptransport.Transport).Options()
	if o.ConnectTimeout != 2*time.Second || o.KeepAlive != 30*time.Second || !o.DisableNoDelay || o.SendBufferSize != 65536 || o.ReceiveBufferSize != 131072 || len(o.Allow) != 2 {
		t.Fatalf("options %+v", o)
	}
	for _, bad := range []map[string]string{{"connect_timeout": "soon"}, {"tls": "on"}, {"send_buffer": "-1"}, {"allow": "not-an-ip"}, {"max_conns": "10"}} {
		if _, err := open(context.Background(), transportplugin.OpenRequest{Options: bad}); err == nil {
			t.Fatalf("options %v accepted", bad)
		} else if errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
}

// The allow list is applied in the plugin, at accept: a refused peer's
// connection never reaches the host.
func TestPluginTCPAllow(t *testing.T) {
	cl := transportplugintest.Serve(t, open, map[string]string{"allow": "10.9.8.7"})
	ln, err := cl.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The plugin resets the refused connection: the dialer sees it closed,
	// or, when the reset comes first, its connect fails with it (the dial
	// runs in the plugin process: the error arrives as text).
	c, err := cl.Dial(context.Background(), ln.Addr().String())
	switch {
	case err != nil && strings.Contains(err.Error(), syscall.ECONNRESET.Error()):
	case err != nil:
		t.Fatal(err)
	default:
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("a refused peer's connection stayed open")
		}
	}
	allowed := transportplugintest.Serve(t, open, map[string]string{"allow": "127.0.0.0/8"})
	ln2, err := allowed.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	c2, err := allowed.Dial(context.Background(), ln2.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	s, err := ln2.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}
