package filestore_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/examples/store-plugin/filestore"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/sdk/storeplugin"
	"github.com/replicatorhq/replicator/sdk/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(_ context.Context, req storeplugin.OpenRequest) (store.Store, error) {
	return filestore.Open(req.Dir, req.SegmentSize)
}

func TestPluginFilestoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, dir string, segSize int64) store.Store {
		st, err := filestore.Open(dir, segSize)
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}

func TestPluginFilestoreConformanceOverGRPC(t *testing.T) {
	storetest.Run(t, storetest.PluginFactory(open, storeplugin.ClientConfig{}))
}
