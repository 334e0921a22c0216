package commitlog_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/node"
	"github.com/replicatorhq/replicator/internal/pluginhost"
	"github.com/replicatorhq/replicator/plugins/commitlog"
	"github.com/replicatorhq/replicator/sdk/record"
)

// TestDaemonSegmentSizeMismatch: a node restarted with another
// --segment-size fails with the store's "segment size mismatch" message
// (what the daemon prints), not "corrupt commit log".
func TestDaemonSegmentSizeMismatch(t *testing.T) {
	dir := t.TempDir()
	o := commitlog.DefaultOptions()
	o.SegmentSize = 64 << 10
	l, err := commitlog.Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if _, err := l.Append(context.Background(), &record.Message{Topic: "T", Body: make([]byte, 500+i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	n, err := node.New(node.Config{Role: core.AsyncMaster, DataDir: dir, Listen: "127.0.0.1:0", HAListen: "127.0.0.1:0",
		SegmentSize: 128 << 10, Registry: pluginhost.Builtin()})
	if err != nil {
		t.Fatal(err)
	}
	err = n.Run(context.Background())
	if !errors.Is(err, commitlog.ErrSegmentSizeMismatch) || commitlog.IsCorrupt(err) {
		t.Fatalf("Run = %v, want ErrSegmentSizeMismatch", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "segment size mismatch: the log was written with 64 KiB segments, not the configured 128 KiB") || strings.Contains(msg, "corrupt") {
		t.Fatalf("the daemon says %q", msg)
	}
	t.Log(msg)
}
