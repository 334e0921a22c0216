package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"

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
// are a prefix of those the host answered, each as answered, at least up
// to an Append the plugin answered before the kill (so framed records,
// which the host makes from the 8th Append on, are always among those
// checked); appends go on from there. The records answered but not
// recovered are the window framing opens (ClientConfig.FrameAppends): a
// master's sync put holds them on its slave, as the builtin store's
// unflushed tail after a machine crash.
func TestPluginCommitLogFramedCrash(t *testing.T) {
	dir := t.TempDir()
	p, cl := launchStore(t, dir)
	const barrierAt, killAt = 150, 300
	var res []store.AppendResult
	for i := 0; ; i++ {
		if i == barrierAt {
			// A new queue's first Append goes to the plugin, which
			// answers it after the framed records queued before it are
			// in its log: they survive the kill.
			a, err := cl.Append(context.Background(), &record.Message{Topic: "T", QueueID: 1, Body: []byte("barrier")})
			if err != nil {
				t.Fatal(err)
			}
			res = append(res, a)
		}
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
	if len(recs) > len(res) || len(recs) <= barrierAt {
		t.Fatalf("%d records recovered, %d answered, %d before the barrier", len(recs), len(res), barrierAt)
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
	if err != nil || a.Offset != b.Max || a.QueueOffset != int64(len(recs)-1) {
		t.Fatalf("append after recovery: %+v %v (max %d, %d records)", a, err, b.Max, len(recs))
	}
}

// TestPluginCommitLogRingCrash: the slave's plugin process is killed
// (SIGKILL) in the middle of a catch-up whose frames go through the shared
// memory append ring. The slave's store then fails with ErrPluginShutdown,
// and its directory, opened again, holds a valid log (every record
// verifies to its max offset) that is a prefix of the master's: entries
// the plugin had not applied are lost, none is half applied.
func TestPluginCommitLogRingCrash(t *testing.T) {
	plugin := pluginPath(t)
	mdir, sdir := filepath.Join(t.TempDir(), "master"), filepath.Join(t.TempDir(), "slave")
	mst := openMode(t, "builtin", "", mdir)
	defer mst.Close()
	for i := 0; mst.Bounds().Max < 48<<20; i++ {
		body := bytes.Repeat([]byte{byte(i)}, 100+(i*7919)%30000)
		if _, err := mst.Append(context.Background(), &record.Message{Topic: "T", QueueID: int32(i % 4), Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	total := mst.Bounds().Max
	tr := tcptransport.New(tcptransport.DefaultOptions())
	m := startCatchUpMaster(t, mst, tr)
	defer m.Close()
	sst := openMode(t, "external", plugin, sdir).(*procStore)
	grew := make(chan struct{}, 1)
	cancel := sst.Watch(grew)
	defer cancel()
	s := startCatchUpSlave(t, sst, tr, m.Addr())
	deadline := time.NewTimer(time.Minute) // a failure bound, not a wait
	defer deadline.Stop()
	for sst.Stats().RingBytes < 8<<20 {
		select {
		case <-grew:
		case <-deadline.C:
			t.Fatalf("the slave reached %d of %d; its client: %+v", sst.Bounds().Max, total, sst.Stats())
		}
	}
	if err := syscall.Kill(sst.p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Every call fails once the client has seen the plugin go.
	for sst.Flush() == nil {
		select {
		case <-grew:
		case <-deadline.C:
			t.Fatal("the slave's store works on after its plugin was killed")
		}
	}
	if err := sst.Flush(); !errors.Is(err, storeplugin.ErrPluginShutdown) {
		t.Fatalf("Flush after the kill: %v, want ErrPluginShutdown", err)
	}
	s.Close()
	sst.Close()

	got := openMode(t, "builtin", "", sdir)
	defer got.Close()
	b := got.Bounds()
	if b.Max > total || b.Max == 0 {
		t.Fatalf("the recovered slave ends at %d (master %d)", b.Max, total)
	}
	end, n, err := store.ScanRecords(got, b.Min, b.Max)
	if err != nil || end != b.Max {
		t.Fatalf("recovered log: %d records to %d of %d: %v", n, end, b.Max, err)
	}
	for off := b.Min; off < b.Max; {
		v, err := got.Read(off, 1<<20)
		if err != nil || len(v.Data) == 0 {
			t.Fatalf("read at %d: %v", off, err)
		}
		want, err := mst.Read(off, len(v.Data))
		if err != nil || !bytes.Equal(v.Data, want.Data) {
			t.Fatalf("the recovered bytes at %d differ from the master's: %v", off, err)
		}
		off += int64(len(v.Data))
		v.Release()
		want.Release()
	}
	t.Logf("killed after %d bytes through the ring; recovered %d records, %d of %d bytes", sst.Stats().RingBytes, n, b.Max, total)
}
