package etcdstore_test

import (
	"context"
	"fmt"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/replicatorhq/replicator/controller"
	"github.com/replicatorhq/replicator/controller/embedetcd"
	"github.com/replicatorhq/replicator/controller/etcdstore"
)

// A controller store on an embedded etcd: two brokers register, the first
// is elected, its in-sync set grows, and the master's departure elects
// the other.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "etcdstore-example-")
	defer os.RemoveAll(dir)
	srv, err := embedetcd.Start(ctx, embedetcd.Config{Dir: dir, ClientAddr: "127.0.0.1:0"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cli.Close()
	store, _ := etcdstore.New(etcdstore.Config{Client: cli})

	r1, d, _ := store.Register(ctx, "orders", controller.Node{BrokerID: 1, HAAddr: "10.0.0.1:10912"}, 0)
	fmt.Println("broker 1:", d.Outcome, "epoch", d.MasterEpoch)
	r2, _, _ := store.Register(ctx, "orders", controller.Node{BrokerID: 2, HAAddr: "10.0.0.2:10912"}, 0)
	defer r2.Close(ctx)
	set, _ := store.Confirmer("orders", 1).Propose(ctx, 1, []int64{1, 2})
	fmt.Println("in-sync set:", set)

	r1.Close(ctx) // the master leaves: its key goes at once
	d, _ = store.Step(ctx, "orders", controller.LeaseExpired{BrokerID: 1})
	fmt.Println("after broker 1 left:", d.Outcome, "broker", d.Master, "epoch", d.MasterEpoch)
	// Output:
	// broker 1: elected epoch 1
	// in-sync set: [1 2]
	// after broker 1 left: elected broker 2 epoch 2
}
