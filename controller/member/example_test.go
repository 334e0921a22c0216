package member_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/replicatorhq/replicator/controller/embedetcd"
	"github.com/replicatorhq/replicator/controller/etcdstore"
	"github.com/replicatorhq/replicator/controller/member"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/core/epoch"
	"github.com/replicatorhq/replicator/plugins/commitlog"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/record"
)

// node is one controller-mode member: an etcd client, a commit log, an
// epoch file and the member that runs them.
type node struct {
	m    *member.Member
	log  *commitlog.Log
	stop func()
}

// startNode embeds a controller-mode node of group "orders" in a few
// lines: the store, the replica's configuration, member.New and Run.
func startNode(etcdURL, dir string, id int64) (*node, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	store, _ := etcdstore.New(etcdstore.Config{Client: cli})
	opts := commitlog.DefaultOptions()
	opts.SegmentSize = 1 << 20
	log, err := commitlog.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	epochs, err := epoch.Open(dir)
	if err != nil {
		return nil, err
	}
	m, err := member.New(member.Config{
		Replica: core.ReplicaConfig{Store: log, Transport: tcptransport.New(tcptransport.DefaultOptions()), Epochs: epochs,
			Master: core.MasterConfig{ListenAddr: freeAddr(), Role: core.SyncMaster},
			// Idle slaves ack every ReportInterval (5 s): sooner, the in-sync
			// set grows sooner after a proposal that was in flight.
			Slave: core.SlaveConfig{ReportInterval: 200 * time.Millisecond}},
		Store: store, Group: "orders", BrokerID: id, Supervise: true,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	return &node{m: m, log: log, stop: func() { cancel(); <-done; m.Close(); log.Close(); cli.Close() }}, nil
}

// A group of three members on an embedded etcd: the first is elected, a
// sync put reaches every member of the in-sync set, the master stops (it
// revokes its lease), and a member of the set takes over at epoch 2.
func Example() {
	dir, _ := os.MkdirTemp("", "member-example-")
	defer os.RemoveAll(dir)
	srv, err := embedetcd.Start(context.Background(), embedetcd.Config{Dir: filepath.Join(dir, "etcd"), ClientAddr: "127.0.0.1:0"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	nodes := map[int64]*node{}
	for id := int64(1); id <= 3; id++ {
		n, err := startNode(srv.ClientURL(), filepath.Join(dir, fmt.Sprint(id)), id)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer func() { n.stop() }()
		nodes[id] = n
		if id == 1 { // the first to register is elected
			waitUntil(func() bool { return n.m.Status().Role == core.RoleMaster })
		}
	}
	st := nodes[1].m.Status()
	fmt.Println("master:", st.Master, "epoch", st.MasterEpoch)
	waitUntil(func() bool { return len(nodes[1].m.Status().InSyncSet) == 3 })
	fmt.Println("in-sync set:", nodes[1].m.Status().InSyncSet)

	res, err := nodes[1].m.Put(context.Background(), &record.Message{Topic: "orders", Body: []byte("order 1")})
	fmt.Println("put:", res.Status, err)

	nodes[1].stop() // fences, revokes the lease: the others elect at once
	nodes[1].stop = func() {}
	var next *node
	waitUntil(func() bool {
		for _, id := range []int64{2, 3} {
			if s := nodes[id].m.Status(); s.Role == core.RoleMaster && s.Fenced == "" {
				next = nodes[id]
				return true
			}
		}
		return false
	})
	st = next.m.Status()
	fmt.Println("new master is 2 or 3:", st.Master == 2 || st.Master == 3, "epoch", st.MasterEpoch)
	recs, _, _ := next.log.ReadMessages(res.Offset, 1)
	fmt.Printf("it holds %q\n", recs[0].Body)
	res, err = next.m.Put(context.Background(), &record.Message{Topic: "orders", Body: []byte("order 2")})
	fmt.Println("put:", res.Status, err)
	// Output:
	// master: 1 epoch 1
	// in-sync set: [1 2 3]
	// put: PUT_OK <nil>
	// new master is 2 or 3: true epoch 2
	// it holds "order 1"
	// put: PUT_OK <nil>
}

func waitUntil(cond func() bool) {
	for deadline := time.Now().Add(20 * time.Second); !cond() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:0"
	}
	defer l.Close()
	return l.Addr().String()
}
