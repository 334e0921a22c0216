// Package benchload drives producer load against a master for benchmarks:
// the one place that measures sync-put throughput and latency, shared by the
// core and plugin benchmarks.
package benchload

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/sdk/record"
)

// SyncPuts runs b.N puts of 1 KiB messages from producers concurrent
// goroutines against m, fails the benchmark if any put is not PUT_OK, and
// reports msgs/s, p50_us and p99_us.
func SyncPuts(ctx context.Context, b *testing.B, m *core.Master, producers int) {
	body := make([]byte, 1024)
	lat := make([][]time.Duration, producers)
	var next, bad atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			msg := &record.Message{Topic: "TopicBench", QueueID: int32(p % 8), Body: body}
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				res, err := m.Put(ctx, msg)
				lat[p] = append(lat[p], time.Since(t0))
				if err != nil || res.Status != core.PutOK {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	if n := bad.Load(); n > 0 {
		b.Fatalf("%d puts not PUT_OK", n)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(q float64) float64 {
		return float64(all[min(len(all)-1, int(q*float64(len(all))))].Microseconds())
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
	b.ReportMetric(pct(0.50), "p50_us")
	b.ReportMetric(pct(0.99), "p99_us")
}
