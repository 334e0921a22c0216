package core

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/replicatorhq/replicator/transport/memtransport"
)

// TestCoreSimFaults runs a SYNC_MASTER and a slave over memtransport
// connections that split writes into random pieces, delay them and reset
// at random writes, under random appends, for several seeds. It
// checks that PUT_OK implies the slave holds the record, that the slave log
// is always a prefix of the master's, and that it catches up once the
// faults stop.
func TestCoreSimFaults(t *testing.T) {
	var resets atomic.Int64
	defer func() {
		if resets.Load() == 0 {
			t.Error("no connection was reset: the fault injection does nothing")
		}
	}()
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const seg = 8 << 10
				mst, sst := newMemStore(seg), newMemStore(seg)
				nw := memtransport.NewNetwork(memtransport.Config{Seed: seed, Observe: func(ev memtransport.Event) {
					if ev.Kind == memtransport.EventReset {
						resets.Add(1)
					}
				}})
				tr := nw.Transport("node")
				link := nw.Link("node", testMasterAddr)
				link.SetFaults(memtransport.Faults{SplitWrites: 2048, Jitter: 3 * time.Millisecond, ResetProbability: 0.01})
				m := startMaster(t, mst, tr, MasterConfig{Role: SyncMaster, SlaveTimeout: 2 * time.Second, StartFromFirstSegment: true})
				defer m.Close()
				s := startSlave(t, sst, tr, SlaveConfig{ReconnectDelay: time.Second})
				defer s.Close()

				ctx := context.Background()
				var wg sync.WaitGroup
				for p := range 4 {
					wg.Go(func() {
						r := rand.New(rand.NewPCG(seed, uint64(p)))
						for range 60 {
							res, err := m.Put(ctx, testMsg(r.IntN(1500)))
							if err != nil {
								t.Error(err)
								return
							}
							if res.Status == PutOK && sst.Bounds().Max < res.NextOffset {
								t.Errorf("PUT_OK for [%d, %d) but the slave is at %d", res.Offset, res.NextOffset, sst.Bounds().Max)
							}
							time.Sleep(time.Duration(r.IntN(200)) * time.Millisecond)
						}
					})
				}
				wg.Wait()
				link.SetFaults(memtransport.Faults{})
				want := mst.Bounds().Max
				for i := 0; sst.Bounds().Max < want; i++ {
					if i > 600 {
						t.Fatalf("slave stuck at %d of %d: %+v", sst.Bounds().Max, want, s.Status())
					}
					time.Sleep(100 * time.Millisecond)
				}
				t.Logf("slave reconnects: %d", s.Status().Reconnects)
				b := sst.Bounds()
				if !bytes.Equal(sst.bytesAt(b.Min, b.Max), mst.bytesAt(b.Min, b.Max)) {
					t.Fatal("slave log is not the master's")
				}
			})
		})
	}
}
