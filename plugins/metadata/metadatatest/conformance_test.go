package metadatatest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/plugins/metadata"
	"github.com/replicatorhq/replicator/plugins/metadata/metadatatest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPluginConformanceMemory(t *testing.T) {
	metadatatest.TestLocalStore(t, func(t *testing.T) metadata.LocalStore { return metadatatest.NewMemory(nil) })
}

func TestPluginConformanceStore(t *testing.T) {
	metadatatest.TestLocalStore(t, func(t *testing.T) metadata.LocalStore {
		st, err := metadata.Open(t.TempDir(), metadata.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	})
}
