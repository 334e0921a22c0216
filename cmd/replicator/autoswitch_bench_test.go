package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/proctest"
)

// BenchmarkAutoSwitchPromote measures, with real processes, the time from
// running `replicator promote` against a slave (the old master already
// demoted to a slave of it) to the first PUT_OK on the new master, one
// failover per iteration between two nodes. It reports the median and the
// p99 over the iterations (run it with -benchtime=20x for 20 runs).
//
//	go test -run '^$' -bench BenchmarkAutoSwitchPromote -benchtime 20x ./cmd/replicator/
func BenchmarkAutoSwitchPromote(b *testing.B) {
	dir := b.TempDir()
	flags := []string{"--replication", "sync", "--slave-timeout", "2s", "--log-level", "warn"}
	a := proctest.StartAutoSwitch(b, binPath, "master", filepath.Join(dir, "a"), "", "", flags...)
	s := proctest.StartAutoSwitch(b, binPath, "slave", filepath.Join(dir, "b"), a.HA, a.API, flags...)
	nodes := []*proctest.Proc{a, s}
	clients := []*proctest.Client{proctest.NewClient(a.API, 10*time.Second), proctest.NewClient(s.API, 10*time.Second)}
	defer clients[0].Close()
	defer clients[1].Close()
	ctx := context.Background()
	if _, err := clients[0].Put(ctx, "T", []byte("first")); err != nil {
		b.Fatal(err)
	}
	var took []time.Duration
	cur := 0
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		next := 1 - cur
		// The next master follows the current one and holds its log.
		clients[next].WaitStatus(b, "in sync", proctest.WaitTimeout, func(st api.Status) error {
			cs, err := clients[cur].Status(ctx)
			if err != nil {
				return err
			}
			if st.Master == nil || st.Master.HandshakeState != "TRANSFER" || st.MaxOffset != cs.MaxOffset {
				return fmt.Errorf("not caught up: %d of %d", st.MaxOffset, cs.MaxOffset)
			}
			return nil
		})
		if _, err := clients[cur].Role(ctx, api.RoleRequest{Role: api.RoleSlave, Master: nodes[next].HA}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		cmd := exec.Command(binPath, "promote", "--api", nodes[next].API)
		cmd.Env = cleanEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("promote: %v\n%s", err, out)
		}
		for {
			ans, err := clients[next].Put(ctx, "T", []byte("after the promote"))
			if err == nil && ans.Status == "PUT_OK" {
				break
			}
			if time.Since(start) > proctest.WaitTimeout {
				b.Fatalf("no PUT_OK on the new master within %s: %v %+v", proctest.WaitTimeout, err, ans)
			}
		}
		took = append(took, time.Since(start))
		cur = next
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[min(len(took)-1, len(took)*99/100)].Microseconds())/1000, "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkHAProtocols runs the same two measurements with the classic and
// the autoswitch protocol side by side in one run, with real processes:
// the catch-up of a fresh slave from a master holding a 64 MiB log (MB/s)
// and 8 producers of 1 KiB sync puts for 2 s (msgs/s). It reports both
// figures per protocol and autoswitch's share of classic's.
//
//	go test -run '^$' -bench BenchmarkHAProtocols -benchtime 1x ./cmd/replicator/
func BenchmarkHAProtocols(b *testing.B) {
	const (
		logSize   = 64 << 20
		msgSize   = 1 << 10
		producers = 8
		duration  = 2 * time.Second
	)
	body := make([]byte, msgSize)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	type figures struct{ catchMBps, syncMsgs float64 }
	measure := func(protocol string) figures {
		dir := b.TempDir()
		common := []string{"--log-level", "warn", "--segment-size", "128MiB"}
		start := func(role, d, masterHA, masterAPI string, extra ...string) *proctest.Proc {
			args := append(append([]string{}, common...), extra...)
			if protocol == "autoswitch" {
				return proctest.StartAutoSwitch(b, binPath, role, d, masterHA, masterAPI, args...)
			}
			if role == "master" {
				return proctest.StartMaster(b, binPath, d, args...)
			}
			return proctest.StartSlave(b, binPath, d, masterHA, masterAPI, args...)
		}
		m := start("master", filepath.Join(dir, "m"), "", "", "--replication", "sync")
		mc := proctest.NewClient(m.API, 10*time.Second)
		defer mc.Close()
		// Fill the log (no slave: SLAVE_NOT_AVAILABLE, stored).
		fill(b, mc, logSize, producers)
		total, err := mc.Status(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		s := start("slave", filepath.Join(dir, "s"), m.HA, m.API)
		sc := proctest.NewClient(s.API, 10*time.Second)
		defer sc.Close()
		proctest.Eventually(b, "catch-up", 5*time.Minute, func() error {
			st, err := sc.Status(context.Background())
			if err != nil {
				return err
			}
			if st.MaxOffset < total.MaxOffset {
				return fmt.Errorf("%d of %d", st.MaxOffset, total.MaxOffset)
			}
			return nil
		})
		f := figures{catchMBps: float64(total.MaxOffset) / 1e6 / time.Since(t0).Seconds()}
		// Sync puts wait for the slave: connected (classic), in the
		// in-sync set (autoswitch).
		mc.WaitStatus(b, "slave counted", proctest.WaitTimeout, func(st api.Status) error {
			if len(st.Slaves) != 1 || (protocol == "autoswitch" && len(st.InSync) != 2) {
				return fmt.Errorf("slaves %+v, in-sync %v", st.Slaves, st.InSync)
			}
			return nil
		})
		var n atomic.Int64
		var wg sync.WaitGroup
		deadline := time.Now().Add(duration)
		for range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pc := proctest.NewClient(m.API, 10*time.Second)
				defer pc.Close()
				for time.Now().Before(deadline) {
					if a, err := pc.Put(context.Background(), "T", body); err == nil && a.Status == "PUT_OK" {
						n.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		f.syncMsgs = float64(n.Load()) / duration.Seconds()
		s.Stop()
		m.Stop()
		return f
	}
	for range b.N {
		c := measure("classic")
		a := measure("autoswitch")
		b.ReportMetric(c.catchMBps, "classic-catchup-MB/s")
		b.ReportMetric(a.catchMBps, "autoswitch-catchup-MB/s")
		b.ReportMetric(a.catchMBps/c.catchMBps, "catchup-ratio")
		b.ReportMetric(c.syncMsgs, "classic-sync-msgs/s")
		b.ReportMetric(a.syncMsgs, "autoswitch-sync-msgs/s")
		b.ReportMetric(a.syncMsgs/c.syncMsgs, "sync-ratio")
	}
	b.ReportMetric(0, "ns/op")
}

// fill puts messages on the master at c until its log holds size bytes.
func fill(b *testing.B, c *proctest.Client, size int64, producers int) {
	b.Helper()
	body := make([]byte, 16<<10)
	var wg sync.WaitGroup
	var failed atomic.Value
	var next atomic.Int64
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := proctest.NewClient(c.Base, 10*time.Second)
			defer c.Close()
			for next.Load() < size {
				a, err := c.Put(context.Background(), "Fill", body)
				if err != nil {
					failed.Store(err)
					return
				}
				if a.NextOffset > next.Load() {
					next.Store(a.NextOffset)
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}
