package core_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/sdk/record"
)

// BenchmarkSyncPutBatch: the master's put path as the producer stream
// drives it, without gRPC: streams goroutines each put batches of 1 KiB
// messages through Master.PutBatch on a classic SYNC_MASTER with one slave
// (commitlog stores, loopback TCP, both in this process). streams=1/batch=1
// is one producer; the others are what the stream hands the master under
// many producers. It reports msgs/s, the process's CPU time per message
// (master and slave together), the p50 and p99 of a batch's PutBatch call
// and the replication frames sent per message.
func BenchmarkSyncPutBatch(b *testing.B) {
	for _, c := range []struct{ streams, batch int }{{1, 1}, {2, 16}, {4, 32}} {
		b.Run(fmt.Sprintf("streams=%d/batch=%d", c.streams, c.batch), func(b *testing.B) { benchSyncPutBatch(b, c.streams, c.batch) })
	}
}

func benchSyncPutBatch(b *testing.B, streams, batch int) {
	dir := b.TempDir()
	reg := prometheus.NewRegistry()
	m, _ := startBenchPair(b, openBenchLog(b, dir+"/master"), openBenchLog(b, dir+"/slave"),
		core.MasterConfig{ListenAddr: "127.0.0.1:0", Role: core.SyncMaster, Registerer: reg}, core.SlaveConfig{})
	ctx := context.Background()
	frames := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "replicator_ha_sent_frames_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return 0
	}
	body := make([]byte, 1024)
	batches := (int64(b.N) + int64(batch) - 1) / int64(batch)
	lat := make([][]time.Duration, streams)
	var next atomic.Int64
	b.ResetTimer()
	f0, cpu0 := frames(), processCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for p := range streams {
		msgs := make([]*record.Message, batch)
		for i := range msgs {
			msgs[i] = &record.Message{Topic: "TopicBench", QueueID: int32(p % 8), Body: body}
		}
		wg.Go(func() {
			for next.Add(1) <= batches {
				t0 := time.Now()
				out := m.PutBatch(ctx, msgs)
				lat[p] = append(lat[p], time.Since(t0))
				for _, o := range out {
					if o.Err != nil || o.Status != core.PutOK {
						b.Error(o.Status, o.Err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	cpu := processCPU() - cpu0
	b.StopTimer()
	n := float64(batches * int64(batch))
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(n/el.Seconds(), "msgs/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu_ns/msg")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50_us")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99_us")
	b.ReportMetric((frames()-f0)/n, "frames/msg")
}
