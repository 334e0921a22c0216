package commitlog_test

import (
	"testing"

	"github.com/replicatorhq/replicator/plugins/commitlog"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/sdk/storetest"
)

// TestCommitLogConformance runs the sdk/store.Store conformance suite.
func TestCommitLogConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, dir string, segSize int64) store.Store {
		o := commitlog.DefaultOptions()
		o.SegmentSize = segSize
		l, err := commitlog.Open(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}
