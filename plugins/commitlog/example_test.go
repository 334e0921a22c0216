package commitlog_test

import (
	"context"
	"fmt"
	"os"

	"github.com/replicatorhq/replicator/plugins/commitlog"
	"github.com/replicatorhq/replicator/sdk/record"
)

// A master appends; a replica copies the bytes with AppendAt.
func Example() {
	dir, _ := os.MkdirTemp("", "commitlog-example")
	defer os.RemoveAll(dir)

	opts := commitlog.DefaultOptions()
	opts.SegmentSize = 64 << 10 // small for the example; the default is 1 GiB
	master, err := commitlog.Open(dir+"/master", opts)
	if err != nil {
		panic(err)
	}
	defer master.Close()
	res, err := master.Append(context.Background(), &record.Message{Topic: "TopicTest", QueueID: 0, Body: []byte("hello")})
	if err != nil {
		panic(err)
	}
	fmt.Println("stored at", res.Offset, "size", res.Size, "queue offset", res.QueueOffset)

	replica, err := commitlog.Open(dir+"/replica", opts)
	if err != nil {
		panic(err)
	}
	defer replica.Close()
	view, err := master.Read(replica.Bounds().Max, 32<<10) // zero copy
	if err != nil {
		panic(err)
	}
	next, err := replica.AppendAt(view.Offset, view.Data)
	view.Release()
	if err != nil {
		panic(err)
	}
	recs, _, _ := replica.ReadMessages(0, 10)
	fmt.Println("replica max", next, "body", string(recs[0].Body))
	// Output:
	// stored at 0 size 105 queue offset 0
	// replica max 105 body hello
}
