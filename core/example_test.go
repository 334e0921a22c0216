package core_test

import (
	"context"
	"fmt"
	"os"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/plugins/commitlog"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/record"
)

// A Go program embedding a SYNC_MASTER and its slave, each on its own
// commit log, replicating over TCP on 127.0.0.1.
func Example_masterSlave() {
	masterDir, _ := os.MkdirTemp("", "replicator-master-")
	slaveDir, _ := os.MkdirTemp("", "replicator-slave-")
	defer os.RemoveAll(masterDir)
	defer os.RemoveAll(slaveDir)

	opts := commitlog.DefaultOptions()
	opts.SegmentSize = 1 << 20 // small segments for the example; RocketMQ uses 1 GiB
	tr := tcptransport.New(tcptransport.DefaultOptions())

	masterLog, err := commitlog.Open(masterDir, opts)
	if err != nil {
		panic(err)
	}
	defer masterLog.Close()
	master, err := core.NewMaster(masterLog, tr, core.MasterConfig{ListenAddr: "127.0.0.1:0", Role: core.SyncMaster})
	if err != nil {
		panic(err)
	}
	if err := master.Start(); err != nil {
		panic(err)
	}
	defer master.Close()

	slaveLog, err := commitlog.Open(slaveDir, opts)
	if err != nil {
		panic(err)
	}
	defer slaveLog.Close()
	slave, err := core.NewSlave(slaveLog, tr, core.SlaveConfig{MasterAddr: master.Addr()})
	if err != nil {
		panic(err)
	}
	if err := slave.Start(); err != nil {
		panic(err)
	}
	defer slave.Close()

	ctx := context.Background()
	if err := master.WaitSlaves(ctx, 1); err != nil {
		panic(err)
	}
	res, err := master.Put(ctx, &record.Message{Topic: "TopicTest", Body: []byte("hello, slave")})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status) // PUT_OK: the slave holds the record

	recs, _, err := slaveLog.ReadMessages(res.Offset, 1)
	if err != nil {
		panic(err)
	}
	fmt.Printf("slave: %s %q\n", recs[0].Topic, recs[0].Body)
	_, err = slave.Put(ctx, &record.Message{Topic: "TopicTest", Body: []byte("x")})
	fmt.Println(err)
	// Output:
	// PUT_OK
	// slave: TopicTest "hello, slave"
	// replicator: slave rejects producer writes
}
