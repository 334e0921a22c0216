// Package transportplugintest checks a transport plugin across the plugin
// boundary, in process: the transport that an Opener returns is served
// through the SDK's gRPC shim (go-plugin's TestPluginGRPCConn, over a real
// unix socket), its connections are handed to the test as descriptors, and
// transport/transporttest's conformance suite runs against the host side:
//
//	func TestConformance(t *testing.T) { transportplugintest.Run(t, open) }
//
// What passes here passes when the host loads the plugin binary.
package transportplugintest

import (
	"context"
	"testing"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/replicatorhq/replicator/sdk/transportplugin"
	"github.com/replicatorhq/replicator/transport"
	"github.com/replicatorhq/replicator/transport/transporttest"
)

// Run runs transport/transporttest's conformance suite through the plugin
// shim: a fresh plugin (served in process) per case.
func Run(t *testing.T, open transportplugin.Opener, opts ...transporttest.Option) {
	transporttest.Run(t, func(t *testing.T) transport.Transport {
		return Serve(t, open, nil)
	}, opts...)
}

// Serve serves the transport that open returns in process for the rest of
// the test and returns the host's side of it, opened with options. It is
// closed when the test ends.
func Serve(t testing.TB, open transportplugin.Opener, options map[string]string) *transportplugin.Client {
	t.Helper()
	client, _ := goplugin.TestPluginGRPCConn(t, false, map[string]goplugin.Plugin{
		"transport": &transportplugin.Plugin{Open: open},
	})
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense("transport")
	if err != nil {
		t.Fatalf("dispense: %v", err)
	}
	cl, err := raw.(*transportplugin.Conn).Open(context.Background(), transportplugin.OpenRequest{Options: options}, transportplugin.ClientConfig{})
	if err != nil {
		t.Fatalf("open through the plugin: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}
