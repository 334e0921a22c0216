package member

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/controller/embedetcd"
)

// etcdURL is the client URL of the package's embedded etcd: one member
// for all tests (each test uses a key prefix of its own).
var etcdURL string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "member-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	// ElectionMs 500: etcd's shortest lease is then 1 s (the tests' TTL).
	srv, err := embedetcd.Start(ctx, embedetcd.Config{Dir: dir, ClientAddr: "127.0.0.1:0", ElectionMs: 500, TickMs: 50, NoFsync: true})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	etcdURL = srv.ClientURL()
	code := m.Run()
	srv.Close()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
