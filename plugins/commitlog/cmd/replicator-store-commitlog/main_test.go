package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/sdk/storeplugin"
	"github.com/replicatorhq/replicator/sdk/storetest"
)

// TestMain doubles as the plugin binary of the benchmarks: started through
// a symlink named replicator-store-commitlog it serves the store.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "replicator-store-commitlog" {
		main()
		return
	}
	goleak.VerifyTestMain(m)
}

func direct(t *testing.T, dir string, segSize int64) store.Store {
	st, err := open(context.Background(), storeplugin.OpenRequest{Dir: dir, SegmentSize: segSize})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// The builtin store itself, as the core uses it.
func TestPluginCommitLogConformance(t *testing.T) { storetest.Run(t, direct) }

// Across the plugin boundary, reading the shared segment files.
func TestPluginCommitLogConformanceMmap(t *testing.T) {
	storetest.Run(t, func(t *testing.T, dir string, segSize int64) store.Store {
		cl, err := storetest.ServePlugin(t, open).Open(context.Background(),
			storeplugin.OpenRequest{Dir: dir, SegmentSize: segSize}, storeplugin.ClientConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if !cl.SharesFiles() {
			t.Fatal("the commitlog plugin does not share its files")
		}
		return cl
	})
}

// Across the plugin boundary, reading through ReadStream.
func TestPluginCommitLogConformanceReadStream(t *testing.T) {
	storetest.Run(t, storetest.PluginFactory(open, storeplugin.ClientConfig{DisableMmap: true}))
}
