package main

import (
	"bytes"
	"context"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// TestPluginCommitLogCatchUp: a slave whose store is the plugin process
// catches up over TCP from a master whose store is one too (the master
// reads ahead on the read side channel into pooled chunks; the slave's
// receive loop hands each frame body to the client's AppendAtFrom, which
// on Linux reads it into the shared-memory append ring), and the slave's
// files, reopened by the builtin store, hold the master's bytes.
func TestPluginCommitLogCatchUp(t *testing.T) {
	plugin := pluginPath(t)
	mdir, sdir := filepath.Join(t.TempDir(), "master"), filepath.Join(t.TempDir(), "slave")
	{
		st := openMode(t, "builtin", "", mdir)
		for i := 0; st.Bounds().Max < 12<<20; i++ {
			body := bytes.Repeat([]byte{byte(i)}, 100+(i*7919)%60000)
			if _, err := st.Append(context.Background(), &record.Message{Topic: "T", QueueID: int32(i % 4), Body: body}); err != nil {
				t.Fatal(err)
			}
		}
		st.Close()
	}
	mst := openMode(t, "external", plugin, mdir)
	defer mst.Close()
	total := mst.Bounds().Max
	tr := tcptransport.New(tcptransport.DefaultOptions())
	m := startCatchUpMaster(t, mst, tr)
	defer m.Close()
	sst := openMode(t, "external", plugin, sdir)
	grew := make(chan struct{}, 1)
	cancel := sst.Watch(grew)
	s := startCatchUpSlave(t, sst, tr, m.Addr())
	deadline := time.NewTimer(time.Minute) // a failure bound, not a wait
	defer deadline.Stop()
	for sst.Bounds().Max < total {
		select {
		case <-grew:
		case <-deadline.C:
			t.Fatalf("the slave reached %d of %d; its client: %+v", sst.Bounds().Max, total, sst.(*procStore).Stats())
		}
	}
	if st := sst.(*procStore).Stats(); runtime.GOOS == "linux" && (!st.Ring || st.RingBytes < uint64(total)/2) {
		t.Fatalf("stats %+v: the slave's frames did not go through the shared-memory ring", st)
	}
	cancel()
	s.Close()
	if err := sst.Close(); err != nil {
		t.Fatal(err)
	}
	got := openMode(t, "builtin", "", sdir)
	defer got.Close()
	if b := got.Bounds(); b.Max != total {
		t.Fatalf("the slave's files end at %d, the master's log at %d", b.Max, total)
	}
	for off := int64(0); off < total; {
		want, err := mst.Read(off, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		v, err := got.Read(off, len(want.Data))
		if err != nil || len(v.Data) == 0 || !bytes.Equal(v.Data, want.Data[:len(v.Data)]) {
			t.Fatalf("the slave's bytes at %d differ from the master's: %v", off, err)
		}
		off += int64(len(v.Data))
		v.Release()
		want.Release()
	}
	if _, ok := sst.(store.AppenderFrom); !ok {
		t.Fatal("the plugin's client is not a store.AppenderFrom: the slave took the buffered path")
	}
}
