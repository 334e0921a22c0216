package core

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// waitSlaveAt blocks (in fake time) until the slave's log reaches off.
func waitSlaveAt(t *testing.T, st *memStore, off int64) {
	t.Helper()
	for i := 0; st.Bounds().Max < off; i++ {
		if i > 1000 {
			t.Fatalf("slave stuck at %d, want %d", st.Bounds().Max, off)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
	}
}

// TestCoreReplicationCatchUpRestart: a slave catches up on a multi-segment
// log from the first segment while the master keeps appending, is closed
// and restarted on the same store, resumes from its own max offset, and
// ends byte-identical to the master. A master and a slave share a registry.
func TestCoreReplicationCatchUpRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const seg = 64 << 10
		mst := newMemStore(seg)
		mst.fillRecords(t, 0, 5*seg+777)
		tr := newPipeTransport()
		reg := prometheus.NewPedanticRegistry()
		m := startMaster(t, mst, tr, MasterConfig{Role: AsyncMaster, StartFromFirstSegment: true, Registerer: reg})
		defer m.Close()
		sst := newMemStore(seg)
		s := startSlave(t, sst, tr, SlaveConfig{Registerer: reg})

		ctx := context.Background()
		for i := range 200 { // appends during catch-up, crossing segment ends
			if _, err := m.Put(ctx, testMsg(100+i*7)); err != nil {
				t.Fatal(err)
			}
		}
		waitSlaveAt(t, sst, mst.Bounds().Max)
		s.Close()
		restartAt := sst.Bounds().Max
		for i := range 300 {
			if _, err := m.Put(ctx, testMsg(1000+i)); err != nil {
				t.Fatal(err)
			}
		}
		s2 := startSlave(t, sst, tr, SlaveConfig{Registerer: reg})
		defer s2.Close()
		if err := m.WaitSlaves(ctx, 1); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if ss := m.Status().Slaves; len(ss) != 1 || ss[0].RequestOffset != restartAt {
			t.Fatalf("restarted slave requested %+v, want %d", ss, restartAt)
		}
		want := mst.Bounds().Max
		waitSlaveAt(t, sst, want)
		if !bytes.Equal(sst.bytesAt(0, want), mst.bytesAt(0, want)) {
			t.Fatal("slave log differs from the master's")
		}
		synctest.Wait()
		sent := testutil.ToFloat64(m.met.sentBytes)
		recv := testutil.ToFloat64(s2.met.recvBytes)
		if sent != float64(want) || recv != float64(want) { // shared registry: totals over both slave runs
			t.Fatalf("sent %v received %v, want %d", sent, recv, want)
		}
		if got := testutil.ToFloat64(m.met.ackOffset.WithLabelValues(m.Status().Slaves[0].Addr)); got != float64(want) {
			t.Fatalf("ack offset gauge %v, want %d", got, want)
		}
		if n := testutil.CollectAndCount(reg, "replicator_ha_slave_ack_offset_bytes"); n != 1 {
			t.Fatalf("%d ack offset series (the closed slave's must be gone)", n)
		}
		if err := testutil.GatherAndCompare(reg, bytes.NewBufferString(fmt.Sprintf(`
# HELP replicator_ha_connections Slave connections currently open.
# TYPE replicator_ha_connections gauge
replicator_ha_connections 1
# HELP replicator_ha_connections_total Slave connections accepted.
# TYPE replicator_ha_connections_total counter
replicator_ha_connections_total 2
# HELP replicator_ha_client_connected 1 while the slave is connected to its master.
# TYPE replicator_ha_client_connected gauge
replicator_ha_client_connected 1
`)), "replicator_ha_connections", "replicator_ha_connections_total", "replicator_ha_client_connected"); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCoreReplicationTwoSlavesSync: two real slaves, SyncAcks=2, many
// concurrent producers: every PUT_OK record is on both slaves.
func TestCoreReplicationTwoSlavesSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mst := newMemStore(16 << 10)
		tr := newPipeTransport()
		m := startMaster(t, mst, tr, MasterConfig{Role: SyncMaster, SyncAcks: 2})
		defer m.Close()
		var slaves []*memStore
		for range 2 {
			sst := newMemStore(16 << 10)
			s := startSlave(t, sst, tr, SlaveConfig{})
			defer s.Close()
			slaves = append(slaves, sst)
		}
		ctx := context.Background()
		if err := m.WaitSlaves(ctx, 2); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 16)
		for p := range 16 {
			go func() {
				for i := range 20 {
					res, err := m.Put(ctx, testMsg(50+p+i))
					if err == nil && res.Status != PutOK {
						err = fmt.Errorf("status %v", res.Status)
					}
					if err == nil {
						for _, sst := range slaves {
							if sst.Bounds().Max < res.NextOffset {
								err = fmt.Errorf("PUT_OK at %d, a slave is at %d", res.NextOffset, sst.Bounds().Max)
							}
						}
					}
					if err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for range 16 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	})
}
