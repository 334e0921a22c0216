package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/replicatorhq/replicator/internal/config"
	"github.com/replicatorhq/replicator/internal/node"
)

// demo --failover: a controller (embedded etcd) and three controller-mode
// nodes as child processes, producers writing sync puts, the master killed
// with SIGKILL, the election, the old master restarted as a slave, the
// logs compared. The cluster and producer machinery (failoverCluster,
// failoverProducers) is also what BenchmarkFailover measures with.

// Failover demo settings.
const (
	failoverGroup    = "demo"
	failoverNodes    = 3
	failoverTopic    = "FailoverTopic"
	failoverBackoff  = 20 * time.Millisecond // a producer's pause after a refused or failed put
	failoverPutLimit = 10 * time.Second      // one put's HTTP timeout
	failoverTick     = 100 * time.Millisecond
)

// minEtcdLease is the shortest lease etcd grants with its default
// heartbeat and election timeouts (1.5 election timeouts, rounded up to
// whole seconds): a shorter --lease-ttl lasts this long.
const minEtcdLease = 2 * time.Second

// failoverOpts are the options of demo --failover.
type failoverOpts struct {
	Enabled       bool
	LeaseTTL      time.Duration
	ElectionDelay time.Duration
	Phase         time.Duration
}

// failoverOptions are the demo command's --failover options.
func failoverOptions(f *failoverOpts) []*config.Option {
	return []*config.Option{
		{Name: "failover", Help: "run a controller and three controller-mode nodes instead, kill the master and watch the failover", Value: config.Bool(&f.Enabled)},
		{Name: "lease-ttl", Meta: "DURATION", Help: "--failover: the nodes' lease TTL (replicator node --lease-ttl)", Default: "3s", Value: config.Duration(&f.LeaseTTL, time.Second, time.Minute)},
		{Name: "election-delay", Meta: "DURATION", Help: "--failover: the controller's wait after a master's lease expired (replicator controller --election-delay)", Default: defaultElectionDelay, Value: config.Duration(&f.ElectionDelay, 0, time.Minute)},
		{Name: "phase", Meta: "DURATION", Help: "--failover: how long the producers write before the kill, after the election and after the rejoin", Default: "3s", Value: config.Duration(&f.Phase, 0, time.Hour)},
	}
}

// failoverDemo is one run of demo --failover.
type failoverDemo struct {
	e       *env
	o       demoOpts
	size    int
	repl    string
	dir     string
	exe     string
	c       *failoverCluster
	p       *failoverProducers
	tty     bool
	w       io.Writer
	last    time.Time // last progress line
	pending bool      // a progress line without its newline (terminal)
	start   time.Time // of the writes
	master  int       // the index of the master the demo knows of
	epoch   int32     // its epoch
}

func runDemoFailover(ctx context.Context, e *env) int {
	d := &failoverDemo{e: e, o: e.opts.demo, w: e.stdout, size: int(e.opts.demo.Size), repl: e.opts.demo.Replication}
	// The failover demo's own defaults: sync replication (every in-sync
	// node holds each PUT_OK message) and 1 KiB messages.
	if e.sources["replication"] == config.SourceDefault {
		d.repl = "sync"
	}
	if e.sources["size"] == config.SourceDefault {
		d.size = 1 << 10
	}
	if f, ok := e.stdout.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			d.tty = true
		}
	}
	err := d.run(ctx)
	if d.p != nil {
		d.p.halt()
	}
	cerr := d.cleanup()
	if err == nil {
		err = cerr
	}
	if ctx.Err() != nil {
		d.endLine()
		return interrupted(e.stdout, "the nodes and the controller", d.dir, d.o.Keep)
	}
	if err != nil {
		d.endLine()
		return e.fail("demo --failover: %v", err)
	}
	return exitOK
}

// progress draws a progress line: rewritten in place on a terminal (at
// most every failoverTick), one line a second otherwise.
func (d *failoverDemo) progress(s string) {
	if d.tty {
		if time.Since(d.last) >= failoverTick {
			fmt.Fprintf(d.w, "\r\033[K%s", s)
			d.pending = true
			d.last = time.Now()
		}
		return
	}
	if time.Since(d.last) >= time.Second {
		fmt.Fprintln(d.w, s)
		d.last = time.Now()
	}
}

// endLine ends a progress line drawn in place.
func (d *failoverDemo) endLine() {
	if d.pending {
		fmt.Fprintln(d.w)
		d.pending = false
	}
}

// say prints a milestone on its own line.
func (d *failoverDemo) say(format string, args ...any) {
	d.endLine()
	fmt.Fprintf(d.w, format+"\n", args...)
}

func (d *failoverDemo) run(ctx context.Context) error {
	f := d.o.Failover
	var err error
	if d.exe, err = os.Executable(); err != nil {
		return fmt.Errorf("finding this binary: %w", err)
	}
	if d.dir, err = os.MkdirTemp("", "replicator-demo-failover-"); err != nil {
		return err
	}
	fmt.Fprintf(d.w, "replicator demo --failover: a controller and %d nodes in %s\n", failoverNodes, d.dir)
	d.c, err = startFailoverCluster(ctx, failoverConfig{Exe: d.exe, Dir: d.dir, LeaseTTL: f.LeaseTTL,
		ElectionDelay: f.ElectionDelay, Replication: d.repl, SegmentSize: d.o.SegmentSize})
	if err != nil {
		return err
	}
	c := d.c
	fmt.Fprintf(d.w, "  controller  %s  (embedded etcd, election delay %s, pid %d)\n", c.ctlURL, f.ElectionDelay, c.ctl.Pid())
	for _, n := range c.nodes {
		fmt.Fprintf(d.w, "  %s      %s  (HA %s, pid %d)\n", n.name, n.api, n.ha, n.proc.Pid())
	}
	fmt.Fprintf(d.w, "  group %q: %s replication, lease TTL %s, %d producers of %s messages\n",
		failoverGroup, d.repl, f.LeaseTTL, d.o.Concurrency, humanBytes(int64(d.size)))
	electStart := time.Now()
	m, ms, err := c.waitStable(ctx, demoStartTimeout+f.LeaseTTL+f.ElectionDelay, func(sts []nodeStatus, ok []bool) {
		d.progress(fmt.Sprintf("electing the first master: %s | %s", time.Since(electStart).Round(100*time.Millisecond), d.roles(sts, ok)))
	})
	if err != nil {
		return err
	}
	d.say("  %s is master at epoch %d; in-sync set %v (%s after the start)\n", c.nodes[m].name, ms.Epoch, ms.InSync,
		time.Since(electStart).Round(10*time.Millisecond))

	d.master, d.epoch = m, ms.Epoch
	d.start = time.Now()
	d.p = startFailoverProducers(ctx, c, d.o.Concurrency, d.size, true, m)
	if err := d.write(ctx, f.Phase); err != nil {
		return err
	}

	// The failover.
	old := d.master
	lastMax := ms.MaxOffset
	if st, err := c.status(ctx, c.nodes[old]); err == nil {
		lastMax = st.MaxOffset
	}
	w := d.p.rec.arm(old, d.epoch)
	killAt, pid, err := c.kill(old)
	d.p.rec.setKillTime(w, killAt)
	if err != nil {
		return err
	}
	d.say("kill -9 %s (the master, epoch %d, pid %d); its last reported max offset %d", c.nodes[old].name, d.epoch, pid, lastMax)
	if err := d.election(ctx, w); err != nil {
		return err
	}
	if err := d.write(ctx, f.Phase); err != nil {
		return err
	}

	// The old master comes back.
	if err := d.rejoin(ctx, old); err != nil {
		return err
	}
	if err := d.write(ctx, f.Phase); err != nil {
		return err
	}
	d.p.halt()
	if err := d.p.rec.fatalErr(); err != nil {
		return err
	}
	rec := d.p.rec
	d.say("stopped the producers after %s: %d PUT_OK (%s), %d with an unknown outcome, %d attempts refused and retried",
		time.Since(d.start).Round(100*time.Millisecond), rec.ok.Load(), humanBytes(rec.bytes.Load()), rec.unknown.Load(), rec.refused.Load())
	return d.converge(ctx)
}

// roles describes the nodes' roles for a progress line.
func (d *failoverDemo) roles(sts []nodeStatus, ok []bool) string {
	var parts []string
	for i, st := range sts {
		n := d.c.nodes[i]
		switch {
		case n.proc == nil:
			parts = append(parts, fmt.Sprintf("%d: killed", n.id))
		case !ok[i]:
			parts = append(parts, fmt.Sprintf("%d: starting", n.id))
		case isMaster(st.Role) && st.Fenced != "":
			parts = append(parts, fmt.Sprintf("%d: master e%d FENCED %s", n.id, st.Epoch, humanBytes(st.MaxOffset)))
		default:
			parts = append(parts, fmt.Sprintf("%d: %s e%d %s", n.id, shortRole(st.Role), st.Epoch, humanBytes(st.MaxOffset)))
		}
	}
	return strings.Join(parts, "  ")
}

// observe follows the master: a node that says it is master, unfenced,
// at an epoch newer than the one the demo knows of. Outside the failover
// the demo causes, such a change is an election of the controller's own
// (a lease that lapsed on a loaded machine, say): it is shown too.
func (d *failoverDemo) observe(sts []nodeStatus, ok []bool, announce bool) (bool, int) {
	for i, st := range sts {
		if ok[i] && isMaster(st.Role) && st.Fenced == "" && st.Epoch > d.epoch {
			d.master, d.epoch = i, st.Epoch
			if announce {
				d.say("  note: %s is master at epoch %d now: an election the demo did not cause (the logs in %s say why)",
					d.c.nodes[i].name, st.Epoch, d.dir)
			}
			return true, i
		}
	}
	return false, -1
}

// write lets the producers write for dur, drawing progress.
func (d *failoverDemo) write(ctx context.Context, dur time.Duration) error {
	end := time.Now().Add(dur)
	tick := time.NewTicker(failoverTick)
	defer tick.Stop()
	for {
		if err := d.p.rec.fatalErr(); err != nil {
			return err
		}
		if err := d.c.exitedEarly(); err != nil {
			return err
		}
		sts, ok := d.c.statuses(ctx)
		d.observe(sts, ok, true)
		d.drawWrite(sts, ok)
		if !time.Now().Before(end) {
			d.endLine()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (d *failoverDemo) drawWrite(sts []nodeStatus, ok []bool) {
	rec := d.p.rec
	el := time.Since(d.start)
	rate := float64(rec.bytes.Load()) / (1 << 20) / max(el.Seconds(), 1e-3)
	d.progress(fmt.Sprintf("writing %5.1fs %7d PUT_OK %6.1f MiB/s | %s", el.Seconds(), rec.ok.Load(), rate, d.roles(sts, ok)))
}

// election watches the survivors until one is master at a newer epoch
// and the producers have their first PUT_OK on a new master.
func (d *failoverDemo) election(ctx context.Context, w *failoverWindow) error {
	f := d.o.Failover
	timeout := demoStartTimeout + 4*f.LeaseTTL + f.ElectionDelay
	tick := time.NewTicker(demoPoll)
	defer tick.Stop()
	rec := d.p.rec
	for {
		if err := rec.fatalErr(); err != nil {
			return err
		}
		if err := d.c.exitedEarly(); err != nil {
			return err
		}
		sts, ok := d.c.statuses(ctx)
		since := time.Since(w.KillAt)
		if changed, i := d.observe(sts, ok, false); changed {
			d.say("  %s elected master at epoch %d, %s after the kill; in-sync set %v", d.c.nodes[i].name, sts[i].Epoch,
				since.Round(time.Millisecond), sts[i].InSync)
		}
		select {
		case <-w.firstCh:
			win, _ := rec.window(w)
			first := win.First
			epoch := "epoch unknown"
			if first.Epoch != 0 {
				epoch = fmt.Sprintf("epoch %d", first.Epoch)
			}
			d.say("  first PUT_OK on the new master (%s, %s) %s after the kill", d.c.nodes[first.Node].name, epoch,
				first.At.Sub(w.KillAt).Round(time.Millisecond))
			d.say("  (the killed master's lease ends at most %s after its last renewal; the controller elects %s later)",
				max(f.LeaseTTL, minEtcdLease), f.ElectionDelay)
			if d.master == w.Killed {
				// The put's answer came before a status said so.
				d.master, d.epoch = first.Node, max(d.epoch, first.Epoch)
			}
			d.windowReport(ctx, w)
			return nil
		default:
		}
		win, _ := rec.window(w)
		d.progress(fmt.Sprintf("election %5.1fs since the kill | %s | window: %d unknown, %d refused",
			since.Seconds(), d.roles(sts, ok), win.Unknown, win.Refused))
		if since > timeout {
			return fmt.Errorf("no PUT_OK on a new master within %s of the kill (logs in %s)", timeout, d.dir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// windowReport waits (briefly) until every producer had its first PUT_OK
// on the new master and prints what the window cost them.
func (d *failoverDemo) windowReport(ctx context.Context, w *failoverWindow) {
	rec := d.p.rec
	deadline := time.Now().Add(demoStopTimeout)
	for {
		win, all := rec.window(w)
		if all || time.Now().After(deadline) || ctx.Err() != nil {
			note := ""
			if !all {
				note = " (not every producer reached the new master yet)"
			}
			d.say("  in the window (kill to each producer's first PUT_OK on the new master): %d puts with an unknown outcome (may or may not be stored), %d attempts refused with nothing stored and retried (%d puts delayed)%s",
				win.Unknown, win.Refused, win.Delayed, note)
			return
		}
		time.Sleep(demoPoll)
	}
}

// rejoin restarts the old master and waits until it follows the master
// at its epoch and is back in its in-sync set.
func (d *failoverDemo) rejoin(ctx context.Context, old int) error {
	c := d.c
	n := c.nodes[old]
	if err := c.restart(old); err != nil {
		return err
	}
	start := time.Now()
	d.say("restarting %s (the old master) on its data directory (pid %d)", n.name, n.proc.Pid())
	following := false
	tick := time.NewTicker(failoverTick)
	defer tick.Stop()
	for {
		if err := d.p.rec.fatalErr(); err != nil {
			return err
		}
		if err := c.exitedEarly(); err != nil {
			return err
		}
		sts, ok := c.statuses(ctx)
		d.observe(sts, ok, true)
		m := d.master
		st, ms := sts[old], sts[m]
		if !following && m != old && ok[old] && ok[m] && isSlave(st.Role) && st.Epoch == ms.Epoch && st.Master != nil && st.Master.HandshakeState == "TRANSFER" {
			following = true
			cut := "nothing to cut: its log ended at the consistent point"
			if t := st.Master.LastTruncation; t != nil {
				cut = fmt.Sprintf("cut %s (%d records) from its tail, offsets [%d, %d): never confirmed by the new master", humanBytes(t.Bytes), t.Records, t.To, t.From)
			}
			d.say("  %s rejoined as a slave of %s at epoch %d, %s after its restart; %s", n.name, c.nodes[m].name, st.Epoch,
				time.Since(start).Round(time.Millisecond), cut)
		}
		if following && ok[m] && slices.Contains(ms.InSync, n.id) {
			d.say("  %s is in the in-sync set again %v, %s after its restart", n.name, ms.InSync, time.Since(start).Round(time.Millisecond))
			return nil
		}
		d.drawWrite(sts, ok)
		if time.Since(start) > demoCatchUpTimeout {
			return fmt.Errorf("%s did not rejoin within %s (log %s)", n.name, demoCatchUpTimeout, n.log)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// converge waits until every node has the same max offset, compares the
// commit logs and checks every PUT_OK message in the final log.
func (d *failoverDemo) converge(ctx context.Context) error {
	c := d.c
	start := time.Now()
	var sts []nodeStatus
	err := pollChild(ctx, nil, demoCatchUpTimeout, func() error {
		if err := c.exitedEarly(); err != nil {
			return err
		}
		var ok []bool
		sts, ok = c.statuses(ctx)
		m, err := stable(sts, ok)
		if err != nil {
			return err
		}
		for _, st := range sts {
			if st.MaxOffset != sts[m].MaxOffset {
				d.progress(fmt.Sprintf("converging: %s", d.roles(sts, ok)))
				return fmt.Errorf("max offsets differ: %s", d.roles(sts, ok))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	hi, lo, seg := sts[0].MaxOffset, sts[0].MinOffset, sts[0].SegmentSize
	var sum string
	for i := 1; i < len(c.nodes); i++ {
		res, err := compareCommitLogs(filepath.Join(c.nodes[0].data, node.CommitLogDir), filepath.Join(c.nodes[i].data, node.CommitLogDir), lo, hi, seg)
		if err != nil {
			return fmt.Errorf("%s and %s: %w", c.nodes[0].name, c.nodes[i].name, err)
		}
		sum = res.sum
	}
	d.say("converged in %s: nodes 1, 2 and 3 at max offset %d; commit logs byte-identical (%s, sha256 %s)",
		time.Since(start).Round(time.Millisecond), hi, humanBytes(hi-lo), sum[:16])
	n, err := d.checkAcks(ctx, lo, hi)
	if err != nil {
		return err
	}
	d.say("every PUT_OK message (%d) is in the final log at its offset", n)
	if !d.o.Keep {
		fmt.Fprintf(d.w, "\nThe demo stops the nodes and the controller and removes %s now (keep it with --keep).\n", d.dir)
		return nil
	}
	fmt.Fprintf(d.w, "\nThe nodes and the controller are stopped; their data and logs are kept in %s:\n", d.dir)
	fmt.Fprintf(d.w, "  controller  %s\n", filepath.Join(d.dir, "controller.log"))
	for _, n := range c.nodes {
		fmt.Fprintf(d.w, "  %s      %s  (data %s)\n", n.name, n.log, n.data)
	}
	fmt.Fprintf(d.w, "Start them again with:\n  %s %s &\n", d.exe, strings.Join(c.ctlArgs, " "))
	for _, n := range c.nodes {
		fmt.Fprintf(d.w, "  %s %s &\n", d.exe, strings.Join(n.args, " "))
	}
	fmt.Fprintf(d.w, "then: replicator status --api %s   replicator controller show-group --group %s --controller %s\n", c.nodes[0].api, failoverGroup, c.ctlURL)
	return nil
}

// checkAcks reads the final log from node 1 and checks that every PUT_OK
// message is at its offset; it returns how many it checked.
func (d *failoverDemo) checkAcks(ctx context.Context, lo, hi int64) (int, error) {
	keys, err := readKeys(ctx, d.c.nodes[0].api, lo, hi)
	if err != nil {
		return 0, err
	}
	acks := d.p.rec.acks
	for _, a := range acks {
		if got, ok := keys[a.Offset]; !ok || got != a.Key {
			return 0, fmt.Errorf("PUT_OK message %s (offset %d, from %s) is not in the final log (found %q there)", a.Key, a.Offset, d.c.nodes[a.Node].name, got)
		}
	}
	return len(acks), nil
}

// readKeys returns the keys of every message in [lo, hi) of the node at
// apiURL, by offset.
func readKeys(ctx context.Context, apiURL string, lo, hi int64) (map[int64]string, error) {
	cl := newClient(apiURL, 30*time.Second)
	defer cl.hc.CloseIdleConnections()
	keys := map[int64]string{}
	for off := lo; off < hi; {
		page, err := cl.messages(ctx, off, 1024, 0)
		if err != nil {
			return nil, fmt.Errorf("reading the log of %s at %d: %w", apiURL, off, err)
		}
		for _, m := range page.Messages {
			keys[m.Offset] = m.Keys
		}
		if page.NextOffset <= off {
			return nil, fmt.Errorf("reading the log of %s: no progress at %d (next %d)", apiURL, off, page.NextOffset)
		}
		off = page.NextOffset
	}
	return keys, nil
}

// cleanup stops the children and removes the directory (unless --keep).
func (d *failoverDemo) cleanup() error {
	var errs []error
	if d.c != nil {
		errs = append(errs, d.c.stop())
	}
	if d.dir != "" && !d.o.Keep {
		errs = append(errs, os.RemoveAll(d.dir))
	}
	return errors.Join(errs...)
}
