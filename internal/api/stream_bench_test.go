package api

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/replicatorhq/replicator/client"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/sdk/proto/producerv1"
	"github.com/replicatorhq/replicator/sdk/record"
)

// countBackend stores nothing: each put gets the next offset at once, so
// that the benchmarks measure the stream, not a store.
type countBackend struct {
	*fakeBackend
	next atomic.Int64
}

// PutBatch puts the messages one after the other (Put does not wait).
func (c *countBackend) PutBatch(ctx context.Context, msgs []*record.Message) []core.BatchPut {
	return putInTurn(ctx, c.Put, msgs)
}

func (c *countBackend) Put(_ context.Context, msg *record.Message) (core.PutResult, error) {
	size := int64(recOverhead + len(msg.Body))
	end := c.next.Add(size)
	return core.PutResult{Offset: end - size, NextOffset: end}, nil
}

// BenchmarkStreamPut measures 1 KiB puts from 1 and 64 goroutines through one
// client.Producer against a backend that answers at once: "shared" is the
// stream as served, on the API's http.Server (grpc.Server.ServeHTTP, HTTP/2
// from net/http); "separate" is the same service on gRPC's own HTTP/2
// server and its own port, the alternative this design turned down. The
// ratio of the two is the price of sharing the port.
func BenchmarkStreamPut(b *testing.B) {
	for _, bc := range []struct {
		mode    string
		workers int
	}{{"shared", 1}, {"separate", 1}, {"shared", 64}, {"separate", 64}} {
		mode, workers := bc.mode, bc.workers
		b.Run(fmt.Sprintf("%s/p%d", mode, workers), func(b *testing.B) {
			be := &countBackend{fakeBackend: newFake()}
			s, err := New(Config{Backend: be, MaxBodyBytes: 4 << 20, Registerer: prometheus.NewRegistry()})
			if err != nil {
				b.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			var stop func()
			if mode == "shared" {
				srv := s.HTTPServer(DefaultServerLimits(time.Second))
				go srv.Serve(ln)
				stop = func() { s.Drain(); srv.Close() }
			} else {
				gs := grpc.NewServer(s.stream.serverOptions()...)
				producerv1.RegisterProducerServer(gs, s.stream)
				go gs.Serve(ln)
				stop = func() { s.Drain(); gs.Stop() }
			}
			defer stop()
			ctx := context.Background()
			p, err := client.Dial(ctx, []string{ln.Addr().String()})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			body := make([]byte, 1024)
			var left atomic.Int64
			left.Store(int64(b.N))
			b.SetBytes(1024)
			b.ResetTimer()
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					m := &client.Message{Topic: "TopicBench", Body: body}
					for left.Add(-1) >= 0 {
						if _, err := p.Send(ctx, m); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
