package main

import (
	"context"
	"errors"
	"testing"

	goplugin "github.com/hashicorp/go-plugin"
	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/sdk/meta"
	"github.com/replicatorhq/replicator/sdk/metaplugin"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func client(t *testing.T, dir string, defaults bool) *metaplugin.Client {
	t.Helper()
	c, _ := goplugin.TestPluginGRPCConn(t, false, map[string]goplugin.Plugin{"metadata": &metaplugin.Plugin{Open: open}})
	t.Cleanup(func() { c.Close() })
	raw, err := c.Dispense("metadata")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := raw.(*metaplugin.Conn).Open(context.Background(), metaplugin.OpenRequest{Dir: dir, CreateDefaults: defaults})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// TestPluginMetadataOverGRPC: the files store through the plugin shim: a
// master's documents applied to a slave's, with versions and errors intact.
func TestPluginMetadataOverGRPC(t *testing.T) {
	ctx := context.Background()
	m := client(t, t.TempDir(), true)
	s := client(t, t.TempDir(), false)
	es, err := m.List(ctx)
	if err != nil || len(es) == 0 {
		t.Fatalf("master defaults: %v %v", es, err)
	}
	d, err := m.Put(ctx, "topics.json", []byte(`{"topicConfigTable":{"T":{"readQueueNums":4}}}`))
	if err != nil || d.Version.Counter == 0 {
		t.Fatalf("Put: %+v %v", d, err)
	}
	got, err := m.Get(ctx, "topics.json")
	if err != nil || got.Version != d.Version || string(got.Body) != `{"topicConfigTable":{"T":{"readQueueNums":4}}}` {
		t.Fatalf("Get: %+v %v", got, err)
	}
	if err := s.Apply(ctx, []meta.Document{got}); err != nil {
		t.Fatal(err)
	}
	sd, err := s.Get(ctx, "topics.json")
	if err != nil || sd.Version != d.Version || string(sd.Body) != string(got.Body) {
		t.Fatalf("slave copy: %+v %v", sd, err)
	}
	if _, err := s.Get(ctx, "absent.json"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("Get absent: %v, want ErrNotFound", err)
	}
	if _, err := m.Put(ctx, "../evil", []byte(`{}`)); !errors.Is(err, meta.ErrInvalidName) {
		t.Fatalf("Put bad name: %v, want ErrInvalidName", err)
	}
	if _, err := m.Put(ctx, "x.json", []byte(`[1]`)); !errors.Is(err, meta.ErrInvalidDocument) {
		t.Fatalf("Put non-object: %v, want ErrInvalidDocument", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.List(ctx); !errors.Is(err, meta.ErrClosed) {
		t.Fatalf("List after Close: %v, want ErrClosed", err)
	}
	s.Close()
}
