// Command embed is replicator's quick start as a library: the smallest Go
// program that embeds a master and a slave in one process, each on its own
// builtin commit log (plugins/commitlog), replicating over the builtin TCP
// transport (plugins/transport-tcp) on 127.0.0.1 with RocketMQ's classic HA
// protocol.
//
//	go run ./examples/embed            # data in a temporary directory, removed at exit
//	go run ./examples/embed -dir D     # data in D/master and D/slave, kept
//
// It starts a SYNC_MASTER, starts a slave that connects to it, waits until
// the slave has reported, writes three messages (each returns PUT_OK only
// once the slave holds it), reads them back from the slave's own commit log,
// and shuts both down. See docs/operators.md for the daemon and
// core/doc.go for the library's behaviour.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/plugins/commitlog"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/record"
)

func main() {
	dir := flag.String("dir", "", "data directory (default: a temporary directory, removed at exit)")
	flag.Parse()
	if err := run(context.Background(), *dir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

// run is the whole program; the test calls it too.
func run(ctx context.Context, dir string, out io.Writer) (err error) {
	if dir == "" {
		if dir, err = os.MkdirTemp("", "replicator-embed-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}

	// One store per node. Small segments keep the example light; a real
	// deployment keeps RocketMQ's 1 GiB (commitlog.DefaultOptions).
	opts := commitlog.DefaultOptions()
	opts.SegmentSize = 1 << 20
	masterLog, err := commitlog.Open(filepath.Join(dir, "master"), opts)
	if err != nil {
		return fmt.Errorf("open master log: %w", err)
	}
	defer masterLog.Close()
	slaveLog, err := commitlog.Open(filepath.Join(dir, "slave"), opts)
	if err != nil {
		return fmt.Errorf("open slave log: %w", err)
	}
	defer slaveLog.Close()

	// One transport serves both: it only listens and dials.
	tr := tcptransport.New(tcptransport.DefaultOptions())

	master, err := core.NewMaster(masterLog, tr, core.MasterConfig{
		ListenAddr: "127.0.0.1:0", // any free port; master.Addr() tells which
		Role:       core.SyncMaster,
		// An empty slave copies the master's whole log (5.x behaviour)
		// instead of only its last segment (4.x).
		StartFromFirstSegment: true,
	})
	if err != nil {
		return err
	}
	if err := master.Start(); err != nil {
		return err
	}
	defer master.Close()

	slave, err := core.NewSlave(slaveLog, tr, core.SlaveConfig{MasterAddr: master.Addr()})
	if err != nil {
		return err
	}
	if err := slave.Start(); err != nil {
		return err
	}
	defer slave.Close()

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := master.WaitSlaves(wctx, 1); err != nil {
		return fmt.Errorf("waiting for the slave: %w", err)
	}
	fmt.Fprintf(out, "master on %s, slave connected\n", master.Addr())

	first := int64(-1)
	for _, body := range []string{"hello", "from", "replicator"} {
		res, err := master.Put(ctx, &record.Message{Topic: "TopicTest", Body: []byte(body)})
		if err != nil {
			return fmt.Errorf("put: %w", err)
		}
		if first < 0 {
			first = res.Offset
		}
		fmt.Fprintf(out, "put %-10q %s offset=%d\n", body, res.Status, res.Offset)
	}

	// PUT_OK from a SYNC_MASTER means the slave's log holds the record.
	recs, _, err := slaveLog.ReadMessages(first, 16)
	if err != nil {
		return fmt.Errorf("read the slave's log: %w", err)
	}
	for _, r := range recs {
		fmt.Fprintf(out, "slave has offset=%d topic=%s body=%q\n", r.PhysicalOffset, r.Topic, r.Body)
	}
	return nil
}
