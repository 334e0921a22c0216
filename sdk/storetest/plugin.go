package storetest

import (
	"context"
	"testing"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/sdk/storeplugin"
)

// PluginFactory serves the stores that open opens through the plugin's gRPC
// shim, in process (go-plugin's TestPluginGRPCConn over a real unix
// socket), and returns the host-side clients: Run(t, PluginFactory(...))
// checks a store across the plugin boundary without building a binary.
func PluginFactory(open storeplugin.Opener, cfg storeplugin.ClientConfig) Factory {
	return func(t *testing.T, dir string, segSize int64) store.Store {
		t.Helper()
		cl, err := ServePlugin(t, open).Open(context.Background(), storeplugin.OpenRequest{Dir: dir, SegmentSize: segSize}, cfg)
		if err != nil {
			t.Fatalf("open through the plugin: %v", err)
		}
		return cl
	}
}

// ServePlugin serves a store plugin in process for the rest of the test and
// returns the host's unopened connection to it.
func ServePlugin(t testing.TB, open storeplugin.Opener) *storeplugin.Conn {
	t.Helper()
	client, server := goplugin.TestPluginGRPCConn(t, false, map[string]goplugin.Plugin{
		"store": &storeplugin.Plugin{Open: open},
	})
	_ = server // stopped by client.Close, through go-plugin's controller
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense("store")
	if err != nil {
		t.Fatalf("dispense: %v", err)
	}
	return raw.(*storeplugin.Conn)
}
