package core

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/core/epoch"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
)

// BenchmarkCatchUpMemStore is BenchmarkCatchUp on in-memory stores: the
// replication pipeline and loopback TCP without the commit log's costs
// (page faults, record indexing).
func BenchmarkCatchUpMemStore(b *testing.B) {
	const size = 256 << 20
	const seg = 64 << 20
	mst := newMemStore(seg)
	mst.Grow(size)
	mst.fill(b, 0, size)
	for _, proto := range []Protocol{ProtocolClassic, ProtocolAutoSwitch} {
		b.Run("protocol="+proto.String(), func(b *testing.B) { benchCatchUpMemStore(b, mst, proto) })
	}
}

func benchCatchUpMemStore(b *testing.B, mst *memStore, proto Protocol) {
	const size = 256 << 20
	const seg = 64 << 20
	tr := tcptransport.New(tcptransport.DefaultOptions())
	mcfg := MasterConfig{ListenAddr: "127.0.0.1:0", StartFromFirstSegment: true, Protocol: proto}
	if proto == ProtocolAutoSwitch {
		mcfg.Epochs = benchEpochFile(b, 1)
	}
	m, err := NewMaster(mst, tr, mcfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Start(); err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	b.SetBytes(size)
	b.ResetTimer()
	var elapsed time.Duration
	for range b.N {
		b.StopTimer()
		sst := newMemStore(seg)
		sst.Grow(size) // fault the pages in, as a prefaulting store would
		scfg := SlaveConfig{MasterAddr: m.Addr(), Protocol: proto, BrokerID: 2}
		if proto == ProtocolAutoSwitch {
			scfg.Epochs = benchEpochFile(b, 0)
		}
		s, err := NewSlave(sst, tr, scfg)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := s.Start(); err != nil {
			b.Fatal(err)
		}
		for sst.Bounds().Max < size {
			time.Sleep(200 * time.Microsecond)
		}
		elapsed += time.Since(start)
		b.StopTimer()
		s.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(size)*float64(b.N)/elapsed.Seconds()/1e6, "catchup_MB/s")
}

// benchEpochFile is a new epoch file; with first > 0 it holds that epoch
// from offset 0.
func benchEpochFile(b *testing.B, first int32) *epoch.File {
	ep, err := epoch.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	if first > 0 {
		if err := ep.Append(first, 0); err != nil {
			b.Fatal(err)
		}
	}
	return ep
}

// BenchmarkSyncPutMemStore is BenchmarkSyncPut on in-memory stores with 16
// producers: the replication pipeline's own latency, without the commit log.
func BenchmarkSyncPutMemStore(b *testing.B) {
	mst, sst := newMemStore(1<<30), newMemStore(1<<30)
	tr := tcptransport.New(tcptransport.DefaultOptions())
	m, err := NewMaster(mst, tr, MasterConfig{ListenAddr: "127.0.0.1:0", Role: SyncMaster})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Start(); err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	s, err := NewSlave(sst, tr, SlaveConfig{MasterAddr: m.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(); err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := m.WaitSlaves(ctx, 1); err != nil {
		b.Fatal(err)
	}
	const producers = 16
	lat := make([][]time.Duration, producers)
	var next atomic.Int64
	msg := testMsg(1024)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				res, err := m.Put(ctx, msg)
				lat[p] = append(lat[p], time.Since(t0))
				if err != nil || res.Status != PutOK {
					b.Error(res.Status, err)
					return
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50_us")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99_us")
}
