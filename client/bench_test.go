package client_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/replicatorhq/replicator/client"
	"github.com/replicatorhq/replicator/internal/node"
)

// BenchmarkSend measures sync puts of 1 KiB through one Producer to a
// SYNC_MASTER with one slave, both in this process over loopback TCP, from
// 1, 16 and 64 goroutines: msgs/s, latency percentiles and the mean batch
// the master received. `replicator bench sync --via client` measures the
// same with the nodes as separate processes.
func BenchmarkSend(b *testing.B) {
	master, _ := pair(b)
	for _, workers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("p%d", workers), func(b *testing.B) {
			p := dial(b, []string{master.URL()})
			ctx := context.Background()
			body := make([]byte, 1024)
			b0, m0 := batchStats(b, master)
			var left atomic.Int64
			left.Store(int64(b.N))
			lat := make([][]time.Duration, workers)
			b.SetBytes(1024)
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					m := &client.Message{Topic: "TopicBench", QueueID: int32(w % 8), Body: body}
					for left.Add(-1) >= 0 {
						t0 := time.Now()
						if _, err := p.Send(ctx, m); err != nil {
							b.Error(err)
							return
						}
						lat[w] = append(lat[w], time.Since(t0))
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			all := slices.Concat(lat...)
			slices.Sort(all)
			b1, m1 := batchStats(b, master)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			if len(all) > 0 {
				b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
			}
			if b1 > b0 {
				b.ReportMetric((m1-m0)/(b1-b0), "msgs/batch")
			}
		})
	}
}

// batchStats reads the master's batch histogram: batches and messages.
func batchStats(b *testing.B, n *node.Node) (batches, msgs float64) {
	mfs, err := n.Registry().Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "replicator_stream_batch_messages" && mf.GetType() == dto.MetricType_HISTOGRAM {
			h := mf.GetMetric()[0].GetHistogram()
			return float64(h.GetSampleCount()), h.GetSampleSum()
		}
	}
	return 0, 0
}
