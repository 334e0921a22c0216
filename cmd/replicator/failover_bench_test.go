package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkFailover measures controller-mode failover with real
// processes: a controller (embedded etcd) and three nodes of one group
// (sync replication) on loopback, four producers of 1 KiB puts following
// the master (demo --failover's producers). Each iteration kills the
// master with SIGKILL and times the kill to the first PUT_OK on the new
// master; then the old master is restarted and the group waits until it is
// back in the in-sync set before the next kill (one cluster for every
// iteration: b.Loop). It reports, over the iterations:
//
//   - p50-ms, p99-ms, max-ms: kill to first PUT_OK on the new master;
//   - elected-p50-ms: kill to a survivor's status saying master at a newer
//     epoch (polled every 10 ms);
//   - unknown/op: puts per failover whose outcome the producer cannot know
//     (connection reset, "stored": "maybe"), from the kill to each
//     producer's first PUT_OK on the new master;
//   - refused/op: attempts per failover refused with nothing stored (and
//     retried after 20 ms), in the same window.
//
// The sub-benchmarks: the defaults (lease TTL 3 s, controller election
// delay 1 s), the 3 s delay of session 7, a 1 s lease with a 1 s delay,
// and the 3 s lease without the delay. Run 20 failovers of one with
//
//	go test -run '^$' -bench 'BenchmarkFailover/ttl=3s,delay=1s' -benchtime 20x ./cmd/replicator/
func BenchmarkFailover(b *testing.B) {
	for _, v := range []struct{ ttl, delay time.Duration }{
		{3 * time.Second, time.Second},
		{3 * time.Second, 3 * time.Second},
		{time.Second, time.Second},
		{3 * time.Second, 0},
	} {
		b.Run(fmt.Sprintf("ttl=%s,delay=%s", v.ttl, v.delay), func(b *testing.B) { benchFailover(b, v.ttl, v.delay) })
	}
}

func benchFailover(b *testing.B, ttl, delay time.Duration) {
	const producers = 4
	ctx := context.Background()
	dir := b.TempDir()
	c, err := startFailoverCluster(ctx, failoverConfig{Exe: binPath, Dir: dir, LeaseTTL: ttl, ElectionDelay: delay,
		Replication: "sync", SegmentSize: 64 << 20, LogLevel: "info"})
	if c != nil {
		defer c.stop()
	}
	fatal := func(format string, args ...any) {
		b.Helper()
		b.Fatalf(format+"\n%s", append(args, failoverLogs(c))...)
	}
	if err != nil {
		fatal("starting the cluster: %v", err)
	}
	m, _, err := c.waitStable(ctx, time.Minute, nil)
	if err != nil {
		fatal("%v", err)
	}
	p := startFailoverProducers(ctx, c, producers, 1<<10, false, m)
	defer p.halt()
	var took, elected []time.Duration
	var unknown, refused int
	for b.Loop() {
		m, ms, err := c.waitStable(ctx, 2*time.Minute, nil)
		if err != nil {
			fatal("before failover %d: %v", len(took)+1, err)
		}
		// Every producer writes to the master again.
		start := p.rec.ok.Load()
		for deadline := time.Now().Add(time.Minute); p.rec.ok.Load() < start+2*producers; {
			if time.Now().After(deadline) {
				fatal("before failover %d: the producers wrote %d puts in a minute", len(took)+1, p.rec.ok.Load()-start)
			}
			time.Sleep(time.Millisecond)
		}
		w := p.rec.arm(m, ms.Epoch)
		at, _, err := c.kill(m)
		p.rec.setKillTime(w, at)
		if err != nil {
			fatal("%v", err)
		}
		var electedAt time.Time
		limit := time.Minute + 4*ttl + delay
	wait:
		for {
			if electedAt.IsZero() {
				sts, ok := c.statuses(ctx)
				for i, st := range sts {
					if ok[i] && isMaster(st.Role) && st.Epoch > ms.Epoch {
						electedAt = time.Now()
						break
					}
				}
			}
			select {
			case <-w.firstCh:
				break wait
			case <-time.After(10 * time.Millisecond):
			}
			if time.Since(at) > limit {
				fatal("failover %d: no PUT_OK on a new master within %s of the kill", len(took)+1, limit)
			}
		}
		// The window closes when every producer reached the new master.
		var win failoverWindow
		for deadline := time.Now().Add(time.Minute); ; {
			var all bool
			win, all = p.rec.window(w)
			if all {
				break
			}
			if time.Now().After(deadline) {
				fatal("failover %d: not every producer reached the new master within a minute", len(took)+1)
			}
			time.Sleep(time.Millisecond)
		}
		took = append(took, win.First.At.Sub(at))
		if !electedAt.IsZero() {
			elected = append(elected, electedAt.Sub(at))
		}
		unknown += win.Unknown
		refused += win.Refused
		if err := c.restart(m); err != nil {
			fatal("%v", err)
		}
		if err := p.rec.fatalErr(); err != nil {
			fatal("%v", err)
		}
	}
	p.halt()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	slices.Sort(took)
	slices.Sort(elected)
	b.ReportMetric(ms(took[len(took)/2]), "p50-ms")
	b.ReportMetric(ms(took[min(len(took)-1, len(took)*99/100)]), "p99-ms")
	b.ReportMetric(ms(took[len(took)-1]), "max-ms")
	if len(elected) > 0 {
		b.ReportMetric(ms(elected[len(elected)/2]), "elected-p50-ms")
	}
	b.ReportMetric(float64(unknown)/float64(len(took)), "unknown/op")
	b.ReportMetric(float64(refused)/float64(len(took)), "refused/op")
	b.ReportMetric(0, "ns/op") // the time per iteration includes the rejoin: not a figure
	b.Logf("%d failovers (ttl %s, delay %s), kill to first PUT_OK on the new master: %v", len(took), ttl, delay, took)
}

// failoverLogs returns the tails of the cluster's logs, for a failure.
func failoverLogs(c *failoverCluster) string {
	if c == nil {
		return ""
	}
	paths := []string{}
	if c.ctl != nil {
		paths = append(paths, c.ctl.Log())
	}
	for _, n := range c.nodes {
		paths = append(paths, n.log)
	}
	var sb strings.Builder
	for _, p := range paths {
		data, _ := os.ReadFile(p)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 30 {
			lines = lines[len(lines)-30:]
		}
		fmt.Fprintf(&sb, "--- %s:\n%s\n", p, strings.Join(lines, "\n"))
	}
	return sb.String()
}
