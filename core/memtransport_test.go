package core

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/replicatorhq/replicator/transport/memtransport"
)

// TestCoreMemtransportFaults runs a SYNC_MASTER with two slaves over
// memtransport links with seeded delay, jitter, writes split into pieces of
// at most 7 bytes, and resets mid-stream; one link is partitioned for 30 s
// (longer than the 20 s housekeeping interval). It checks that PUT_OK implies
// a slave holds the record, that both slaves end byte-identical to the
// master once the faults stop, and that the partition was detected.
func TestCoreMemtransportFaults(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 7))
				nw := memtransport.NewNetwork(memtransport.Config{Seed: seed})
				const seg = 16 << 10
				mst := newMemStore(seg)
				mst.fillRecords(t, 0, 3*seg+100)
				log, _ := newTestLogger(t)
				m, err := NewMaster(mst, nw.Transport("master"), MasterConfig{
					ListenAddr: "mem:master", Role: SyncMaster, SlaveTimeout: 2 * time.Second,
					StartFromFirstSegment: true, Logger: log,
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := m.Start(); err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				var ssts []*memStore
				var slaves []*SlaveNode
				for i, name := range []string{"slave1", "slave2"} {
					nw.Link(name, "mem:master").SetFaults(memtransport.Faults{
						Delay: time.Millisecond, Jitter: time.Millisecond, SplitWrites: 7,
						ResetAfterBytes: int64(20<<10+rng.IntN(60<<10)) * int64(i), // slave1: no resets
					})
					sst := newMemStore(seg)
					s, err := NewSlave(sst, nw.Transport(name), SlaveConfig{MasterAddr: "mem:master", Logger: log.Named(name)})
					if err != nil {
						t.Fatal(err)
					}
					if err := s.Start(); err != nil {
						t.Fatal(err)
					}
					defer s.Close()
					ssts, slaves = append(ssts, sst), append(slaves, s)
				}
				ctx := context.Background()
				if err := m.WaitSlaves(ctx, 1); err != nil {
					t.Fatal(err)
				}
				held := func(next int64) bool {
					for _, sst := range ssts {
						if sst.Bounds().Max >= next {
							return true
						}
					}
					return false
				}
				var wg sync.WaitGroup
				for p := range 3 {
					wg.Go(func() {
						r := rand.New(rand.NewPCG(seed, uint64(p)))
						for range 40 {
							res, err := m.Put(ctx, testMsg(r.IntN(3000)))
							if err != nil {
								t.Error(err)
								return
							}
							if res.Status == PutOK && !held(res.NextOffset) {
								t.Errorf("PUT_OK for [%d, %d) held by no slave", res.Offset, res.NextOffset)
							}
							time.Sleep(time.Duration(r.IntN(500)) * time.Millisecond)
						}
					})
				}
				// Partition slave1 for 30 s in the middle of the load.
				time.Sleep(2 * time.Second)
				l1 := nw.Link("slave1", "mem:master")
				l1.Partition()
				time.Sleep(30 * time.Second)
				l1.Heal()
				wg.Wait()
				for _, name := range []string{"slave1", "slave2"} {
					nw.Link(name, "mem:master").SetFaults(memtransport.Faults{})
				}
				want := mst.Bounds().Max
				for i, sst := range ssts {
					for j := 0; sst.Bounds().Max < want; j++ {
						if j > 600 {
							t.Fatalf("slave%d stuck at %d of %d: %+v", i+1, sst.Bounds().Max, want, slaves[i].Status())
						}
						time.Sleep(100 * time.Millisecond)
					}
					if !bytes.Equal(sst.bytesAt(0, want), mst.bytesAt(0, want)) {
						t.Fatalf("slave%d log differs from the master's", i+1)
					}
				}
				t.Logf("log %d bytes; reconnects: slave1 %d, slave2 %d", want, slaves[0].Status().Reconnects, slaves[1].Status().Reconnects)
				if r := slaves[0].Status().Reconnects; r == 0 {
					t.Error("slave1 never noticed the 30 s partition")
				}
			})
		})
	}
}
