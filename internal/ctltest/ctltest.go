// Package ctltest is the test support of controller-mode tests in more
// than one package (client, internal/node): an embedded controller (an
// etcd member and the supervisor of its groups, what `replicator
// controller` runs) and fixed loopback ports for the HA addresses a node
// registers before it listens. Tests only; the daemon does not import it.
package ctltest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/replicatorhq/replicator/controller/embedetcd"
	"github.com/replicatorhq/replicator/controller/etcdstore"
	"github.com/replicatorhq/replicator/internal/freeport"
)

// StartController runs an embedded etcd member (election 500 ms, tick
// 50 ms, so its shortest lease is about 1 s) in a test directory and the
// supervisor of its groups (elections on lease expiry), and returns a
// controller store on a client of its own. Everything stops at the end of
// t.
func StartController(t testing.TB) *etcdstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := embedetcd.Start(ctx, embedetcd.Config{Dir: t.TempDir(), ClientAddr: "127.0.0.1:0", ElectionMs: 500, TickMs: 50, NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	st, err := etcdstore.New(etcdstore.Config{Client: cli})
	if err != nil {
		cli.Close()
		srv.Close()
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.Supervise(sctx, "", nil)
	}()
	t.Cleanup(func() {
		stop()
		<-done
		cli.Close()
		srv.Close()
	})
	return st
}

// FreeAddr is a free 127.0.0.1 port: a fixed HA address that a node
// registers (with the controller, or in a demote) before it listens.
func FreeAddr(t testing.TB) string {
	t.Helper()
	a, err := freeport.Addrs(1)
	if err != nil {
		t.Fatal(err)
	}
	return a[0]
}
