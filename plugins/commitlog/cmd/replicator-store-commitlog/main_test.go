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

// TestMain doubles as the plugin binary of the benchmarks (started through
// a symlink named replicator-store-commitlog) and of the conformance suite
// (started by storetest.ProcessFactory): either way it serves the store.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "replicator-store-commitlog" {
		main()
		return
	}
	storetest.ServeInTestMain(open)
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

// Across the plugin boundary: this test binary as the plugin process (see
// TestMain), reached through the host's client, as the daemon runs it
// (framed Appends: the daemon's default with async flush) and with every
// Append answered by the plugin.
func TestPluginCommitLogConformanceProcess(t *testing.T) {
	storetest.Run(t, storetest.ProcessFactory(t, "", storeplugin.ClientConfig{FrameAppends: true}))
}

func TestPluginCommitLogConformanceProcessUnframed(t *testing.T) {
	storetest.Run(t, storetest.ProcessFactory(t, "", storeplugin.ClientConfig{}))
}
