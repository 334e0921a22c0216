package benchload

import (
	"context"
	"testing"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/sdk/record"
)

// SyncPuts runs b.N puts of 1 KiB messages from producers concurrent
// goroutines against m, fails the benchmark if any put is not PUT_OK, and
// reports msgs/s, p50_us and p99_us.
func SyncPuts(ctx context.Context, b *testing.B, m *core.Master, producers int) {
	body := make([]byte, 1024)
	msgs := make([]record.Message, producers)
	for p := range msgs {
		msgs[p] = record.Message{Topic: "TopicBench", QueueID: int32(p % 8), Body: body}
	}
	b.ResetTimer()
	st := Drive(ctx, Load{Producers: producers, Puts: int64(b.N)}, func(ctx context.Context, p int) (int64, bool, error) {
		res, err := m.Put(ctx, &msgs[p])
		return res.NextOffset, res.Status == core.PutOK, err
	})
	b.StopTimer()
	if st.Errors > 0 || st.NotOK > 0 {
		b.Fatalf("%d puts failed (first: %v), %d not PUT_OK", st.Errors, st.FirstErr, st.NotOK)
	}
	b.ReportMetric(st.MsgsPerSec(), "msgs/s")
	b.ReportMetric(float64(st.Percentile(0.50).Microseconds()), "p50_us")
	b.ReportMetric(float64(st.Percentile(0.99).Microseconds()), "p99_us")
}
