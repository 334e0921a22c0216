package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/replicatorhq/replicator/internal/pluginhost"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/sdk/storeplugin"
)

// launchStore starts this test binary as the commitlog plugin process (see
// TestMain) and opens its store in dir, as internal/pluginhost does for
// the daemon with async flush (framed Appends).
func launchStore(t *testing.T, dir string) (*pluginhost.Process, *storeplugin.Client) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "replicator-store-commitlog")
	if err := os.Symlink(exe, path); err != nil {
		t.Fatal(err)
	}
	p, err := pluginhost.Launch(pluginhost.Candidate{Path: path, Kind: "store", Name: "commitlog"}, pluginhost.LaunchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	raw, err := p.Dispense()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := raw.(*storeplugin.Conn).Open(context.Background(), storeplugin.OpenRequest{Dir: dir, SegmentSize: 1 << 20},
		storeplugin.ClientConfig{FrameAppends: true})
	if err != nil {
		t.Fatal(err)
	}
	return p, cl
}

// TestPluginCommitLogFramedCrash: the plugin process is killed (SIGKILL)
// while framed Appends stream into it. Appends then fail with
// ErrPluginShutdown, and the store opened again by a new process holds a
// valid log (every record verifies, up to its max offset) whose records
// are a prefix of those the host answered, each as answered; appends go
// on from there. The records answered but not recovered are the window
// framing opens (ClientConfig.FrameAppends): a master's sync put holds
// them on its slave, as the builtin store's unflushed tail after a machine
// crash.
func TestPluginCommitLogFramedCrash(t *testing.T) {
	dir := t.TempDir()
	p, cl := launchStore(t, dir)
	const killAt = 300
	var res []store.AppendResult
	for i := 0; ; i++ {
		if i == killAt {
			if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
		a, err := cl.Append(context.Background(), &record.Message{Topic: "T", Body: make([]byte, 200+i%7)})
		if err != nil {
			if i < killAt || !errors.Is(err, storeplugin.ErrPluginShutdown) {
				t.Fatalf("append %d: %v", i, err)
			}
			break
		}
		res = append(res, a)
		if i > killAt+1_000_000 {
			t.Fatal("appends go on a million records after the kill")
		}
	}
	if st := cl.Stats(); st.Framed < killAt-1 {
		t.Fatalf("only %d appends framed", st.Framed)
	}
	if err := cl.Close(); !errors.Is(err, storeplugin.ErrPluginShutdown) {
		t.Fatalf("Close after the kill: %v", err)
	}

	_, cl = launchStore(t, dir)
	defer cl.Close()
	b := cl.Bounds()
	end, n, err := store.ScanRecords(cl, b.Min, b.Max)
	if err != nil || end != b.Max {
		t.Fatalf("recovered log: %d records to %d of %d: %v", n, end, b.Max, err)
	}
	var recs []record.Record
	for off := b.Min; off < b.Max; {
		rs, next, err := cl.ReadMessages(off, 100)
		if err != nil || len(rs) == 0 {
			t.Fatalf("read at %d: %d records, %v", off, len(rs), err)
		}
		recs, off = append(recs, rs...), next
	}
	if len(recs) > len(res) {
		t.Fatalf("%d records recovered, %d answered", len(recs), len(res))
	}
	for i, r := range recs {
		a := res[i]
		if r.PhysicalOffset != a.Offset || r.QueueOffset != a.QueueOffset || r.StoreTimestamp != a.StoreTimestamp || r.TotalSize != a.Size {
			for j := range min(len(recs), 12) {
				t.Logf("rec %d: off %d qo %d size %d ts %d; answered %+v", j, recs[j].PhysicalOffset, recs[j].QueueOffset, recs[j].TotalSize, recs[j].StoreTimestamp, res[j])
			}
			t.Fatalf("record %d: recovered %+v, answered %+v", i, r.QueueOffset, a)
		}
	}
	t.Logf("answered %d appends, %d before the kill; recovered %d", len(res), killAt, len(recs))
	a, err := cl.Append(context.Background(), &record.Message{Topic: "T", Body: []byte("after")})
	if err != nil || a.Offset != b.Max || a.QueueOffset != int64(len(recs)) {
		t.Fatalf("append after recovery: %+v %v (max %d, %d records)", a, err, b.Max, len(recs))
	}
}
