package client_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/replicatorhq/replicator/client"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/node"
	"github.com/replicatorhq/replicator/internal/pluginhost"
)

// Example stores messages on a master: one with Send, many in flight with
// SendAsync.
func Example() {
	// A master node in this process, for the example; in production it is
	// `replicator master --listen 127.0.0.1:8080 ...`.
	dir, _ := os.MkdirTemp("", "client-example-")
	defer os.RemoveAll(dir)
	n, _ := node.New(node.Config{Role: core.AsyncMaster, DataDir: filepath.Join(dir, "data"), Listen: "127.0.0.1:0",
		HAListen: "127.0.0.1:0", SegmentSize: 1 << 20, Registry: pluginhost.Builtin()})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	<-n.Ready()
	defer func() { stop(); <-done }()

	dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := client.Dial(dctx, []string{n.URL()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()

	res, err := p.Send(dctx, &client.Message{Topic: "TopicTest", Body: []byte("hello"), Tags: "greeting"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Status, res.Offset)

	futures := make([]*client.Future, 100)
	for i := range futures {
		futures[i] = p.SendAsync(&client.Message{Topic: "TopicTest", Body: []byte(fmt.Sprintf("message %d", i))})
	}
	stored := 0
	for _, f := range futures {
		if _, err := f.Result(); err == nil {
			stored++
		}
	}
	fmt.Println(stored, "stored")
	// Output:
	// PUT_OK 0
	// 100 stored
}
