package etcdstore

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/replicatorhq/replicator/controller"
)

// BenchmarkStoreHeartbeat measures Registration.Update against the
// package's embedded etcd: a guarded put of the node key plus a step (one
// range read, no write while the group has a master).
func BenchmarkStoreHeartbeat(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	r, _, err := s.Register(ctx, "g", controller.Node{BrokerID: 1}, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(ctx)
	var off int64
	for b.Loop() {
		off += 4096
		if _, err := r.Update(ctx, 1, off); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStoreSetChange measures an accepted AlterSyncStateSet (read,
// step, compare-and-put), alternating between two sets.
func BenchmarkStoreSetChange(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	for id := int64(1); id <= 2; id++ {
		r, _, err := s.Register(ctx, "g", controller.Node{BrokerID: id}, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close(ctx)
	}
	c := s.Confirmer("g", 1)
	sets := [][]int64{{1, 2}, {1}}
	i := 0
	for b.Loop() {
		if _, err := c.Propose(ctx, 1, sets[i%2]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func benchStore(b *testing.B) *Store {
	b.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	s, err := New(Config{Client: cli, Prefix: "/bench-" + b.Name()})
	if err != nil {
		b.Fatal(err)
	}
	return s
}
