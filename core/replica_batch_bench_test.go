//go:build unix

package core

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/record"
)

// BenchmarkReplicaPutBatch: an autoswitch SYNC_MASTER replica (in-memory
// store) with one replica slave over loopback TCP, 8 producers putting
// batches of 16 messages of 1 KiB through Replica.PutBatch (one replica
// wait per batch), as the producer stream does. It reports msgs/s and the
// process's CPU time (user + system) per message.
func BenchmarkReplicaPutBatch(b *testing.B) {
	benchReplicaBatches(b, func(r *Replica, ctx context.Context, msgs []*record.Message) []BatchPut { return r.PutBatch(ctx, msgs) })
}

func benchReplicaBatches(b *testing.B, put func(*Replica, context.Context, []*record.Message) []BatchPut) {
	tr := tcptransport.New(tcptransport.DefaultOptions())
	newRep := func(id int64) *Replica {
		r, err := NewReplica(ReplicaConfig{Store: newMemStore(1 << 30), Transport: tr, Epochs: benchEpochFile(b, 0), BrokerID: id,
			Master: MasterConfig{ListenAddr: "127.0.0.1:0", Role: SyncMaster}})
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	m, s := newRep(1), newRep(2)
	defer m.Close()
	defer s.Close()
	if _, err := m.BecomeMaster(0); err != nil {
		b.Fatal(err)
	}
	if err := s.BecomeSlave(m.Master().Addr()); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Master().WaitSlaves(ctx, 1); err != nil {
		b.Fatal(err)
	}
	const producers, batch = 8, 16
	msgs := make([]*record.Message, batch)
	for i := range msgs {
		msgs[i] = testMsg(1024)
	}
	batches := (int64(b.N) + batch - 1) / batch
	var next atomic.Int64
	b.ResetTimer()
	cpu0 := cpuTime(b)
	start := time.Now()
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for next.Add(1) <= batches {
				for _, o := range put(m, ctx, msgs) {
					if o.Err != nil || o.Status != PutOK {
						b.Error(o.Status, o.Err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	cpu := cpuTime(b) - cpu0
	b.StopTimer()
	n := float64(batches * batch)
	b.ReportMetric(n/el.Seconds(), "msgs/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu_ns/msg")
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
