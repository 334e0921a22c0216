package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/replicatorhq/replicator/internal/testlog"
)

// TestSingleMember: one member serves, and its data survives a clean
// restart on the same directory, with fsync and with NoFsync.
func TestSingleMember(t *testing.T) {
	for _, noFsync := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoFsync=%v", noFsync), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			dir := t.TempDir()
			s, err := Start(ctx, Config{Dir: dir, ClientAddr: "127.0.0.1:0", NoFsync: noFsync, Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testlog.Writer(t)})})
			if err != nil {
				t.Fatal(err)
			}
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.ClientURL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cli.Put(ctx, "/k", "v"); err != nil {
				t.Fatal(err)
			}
			cli.Close()
			s.Close()

			// The data survives a restart on the same directory.
			s, err = Start(ctx, Config{Dir: dir, ClientAddr: "127.0.0.1:0", NoFsync: noFsync})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			cli, err = clientv3.New(clientv3.Config{Endpoints: []string{s.ClientURL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			resp, err := cli.Get(ctx, "/k")
			if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
				t.Fatalf("after restart: %v %v", resp, err)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]Config{
		"no dir":          {},
		"bad client addr": {Dir: t.TempDir(), ClientAddr: "nohostport"},
		"name not listed": {Dir: t.TempDir(), Name: "c", InitialCluster: "a=http://127.0.0.1:1,b=http://127.0.0.1:2"},
		"bad entry":       {Dir: t.TempDir(), Name: "a", InitialCluster: "a"},
		"cert, no key":    {Dir: t.TempDir(), TLSCert: "c.pem"},
		"client CA alone": {Dir: t.TempDir(), TLSClientCA: "ca.pem"},
	} {
		if _, err := Start(ctx, c); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}
