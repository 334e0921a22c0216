package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/replicatorhq/replicator/internal/childproc"
	"github.com/replicatorhq/replicator/internal/config"
	"github.com/replicatorhq/replicator/internal/freeport"
	"github.com/replicatorhq/replicator/internal/node"
	"github.com/replicatorhq/replicator/plugins/commitlog"
	"github.com/replicatorhq/replicator/sdk/store"
)

// Demo timings.
const (
	demoStartTimeout   = 30 * time.Second // a node to answer /readyz
	demoConnectTimeout = 30 * time.Second // the slave to connect
	demoCatchUpTimeout = 2 * time.Minute  // the slave to catch up after the writes
	demoStopTimeout    = 20 * time.Second // a node to exit after SIGTERM
	demoPoll           = 20 * time.Millisecond
)

// startChild starts a node of the demo (internal/childproc), its output
// appended to logPath: a node of demo --failover restarts on the same log.
func startChild(exe, name, logPath string, args ...string) (*childproc.Proc, error) {
	return childproc.Start(childproc.Config{Exe: exe, Args: args, Name: name, Log: logPath, Append: true})
}

// freePorts returns n distinct free loopback TCP ports, below the
// kernel's ephemeral range (internal/freeport).
func freePorts(n int) ([]int, error) { return freeport.Ports(n) }

// demo is one run of the demo.
type demo struct {
	e        *env
	o        demoOpts
	dir      string
	exe      string
	master   *childproc.Proc
	slave    *childproc.Proc
	mAPI     string // master API URL
	sAPI     string // slave API URL
	haAddr   string
	mArgs    []string
	sArgs    []string
	tty      bool
	mc, sc   *client
	progress io.Writer
}

// interrupted ends a demo stopped by a signal: it says what stopped and
// that the demo's directory dir was removed (unless keep), and returns
// the exit status 130.
func interrupted(w io.Writer, stopped, dir string, keep bool) int {
	fmt.Fprintf(w, "\ninterrupted; %s stopped", stopped)
	if dir != "" && !keep {
		fmt.Fprintf(w, " and %s removed", dir)
	}
	fmt.Fprintln(w)
	return 130
}

func runDemo(ctx context.Context, e *env) int {
	if e.opts.demo.Failover.Enabled {
		return runDemoFailover(ctx, e) // demo_failover.go
	}
	d := &demo{e: e, o: e.opts.demo, progress: e.stdout}
	if f, ok := e.stdout.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			d.tty = true
		}
	}
	err := d.run(ctx)
	cerr := d.cleanup()
	if err == nil {
		err = cerr
	}
	if ctx.Err() != nil {
		return interrupted(e.stdout, "both nodes", d.dir, d.o.Keep)
	}
	if err != nil {
		return e.fail("demo: %v", err)
	}
	return exitOK
}

func (d *demo) run(ctx context.Context) error {
	var err error
	if d.exe, err = os.Executable(); err != nil {
		return fmt.Errorf("finding this binary: %w", err)
	}
	if d.dir, err = os.MkdirTemp("", "replicator-demo-"); err != nil {
		return err
	}
	ports, err := freePorts(3)
	if err != nil {
		return fmt.Errorf("finding free ports: %w", err)
	}
	mListen := fmt.Sprintf("127.0.0.1:%d", ports[0])
	d.haAddr = fmt.Sprintf("127.0.0.1:%d", ports[1])
	sListen := fmt.Sprintf("127.0.0.1:%d", ports[2])
	d.mAPI, d.sAPI = "http://"+mListen, "http://"+sListen
	seg := config.FormatSize(d.o.SegmentSize)
	d.mArgs = []string{"master", "--data", filepath.Join(d.dir, "master"), "--listen", mListen,
		"--ha-listen", d.haAddr, "--replication", d.o.Replication, "--segment-size", seg}
	d.sArgs = []string{"slave", "--data", filepath.Join(d.dir, "slave"), "--listen", sListen,
		"--master", d.haAddr, "--master-api", d.mAPI, "--segment-size", seg}
	logArgs := []string{"--log-level", "info", "--log-format", "text"}

	w := d.e.stdout
	fmt.Fprintf(w, "replicator demo: a master and a slave in %s\n", d.dir)
	if d.master, err = startChild(d.exe, "master", filepath.Join(d.dir, "master.log"), append(logArgs, d.mArgs...)...); err != nil {
		return err
	}
	if d.slave, err = startChild(d.exe, "slave", filepath.Join(d.dir, "slave.log"), append(logArgs, d.sArgs...)...); err != nil {
		return err
	}
	d.mc, d.sc = newClient(d.mAPI, 10*time.Second), newClient(d.sAPI, 10*time.Second)
	for _, n := range []struct {
		c   *childproc.Proc
		api string
	}{{d.master, d.mAPI}, {d.slave, d.sAPI}} {
		if err := d.waitReady(ctx, n.c, n.api); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "  master  %s  (HA %s, %s replication)\n  slave   %s  (following %s)\n",
		d.mAPI, d.haAddr, d.o.Replication, d.sAPI, d.haAddr)
	if err := d.waitConnected(ctx); err != nil {
		return err
	}
	fmt.Fprintf(w, "  the slave is connected; segment size %s\n\n", humanBytes(d.o.SegmentSize))

	start := time.Now()
	written, err := d.write(ctx)
	if err != nil {
		return err
	}
	writeDur := time.Since(start)
	caughtUp, err := d.catchUp(ctx)
	if err != nil {
		return err
	}
	res, err := d.verify(ctx)
	if err != nil {
		return err
	}
	mb := float64(written) / (1 << 20)
	lagText := "with the last write"
	if caughtUp >= time.Millisecond {
		lagText = caughtUp.Round(time.Millisecond).String() + " after the last write"
	}
	fmt.Fprintf(w, "\nwrote %d messages (%s of bodies) in %s, %.1f MiB/s; the slave caught up %s\n",
		d.o.Messages, humanBytes(written), writeDur.Round(time.Millisecond), mb/writeDur.Seconds(), lagText)
	fmt.Fprintf(w, "commit logs byte-identical: %d segment files, %s (offsets %d to %d), sha256 %s\n",
		res.files, humanBytes(res.bytes), res.min, res.max, res.sum[:16])
	d.summary()
	return nil
}

func (d *demo) waitReady(ctx context.Context, c *childproc.Proc, apiURL string) error {
	hc := &http.Client{Timeout: time.Second}
	defer hc.CloseIdleConnections()
	return c.WaitReady(ctx, hc, apiURL, demoStartTimeout, demoPoll)
}

func (d *demo) waitConnected(ctx context.Context) error {
	deadline := time.Now().Add(demoConnectTimeout)
	for {
		st, err := d.mc.status(ctx)
		if err == nil && len(st.Slaves) > 0 {
			return nil
		}
		select {
		case <-d.master.Done():
			return d.master.Exited()
		case <-d.slave.Done():
			return d.slave.Exited()
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(demoPoll):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the slave did not connect to the master within %s (logs: %s, %s)", demoConnectTimeout, d.master.Log(), d.slave.Log())
		}
	}
}

// write sends the messages with o.Concurrency producers and draws progress.
func (d *demo) write(ctx context.Context) (int64, error) {
	var next, done, bytesDone atomic.Int64
	var firstErr error
	var errOnce sync.Once
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range d.o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newClient(d.mAPI, 30*time.Second)
			body := make([]byte, d.o.Size)
			for {
				i := next.Add(1) - 1
				if i >= int64(d.o.Messages) || wctx.Err() != nil {
					return
				}
				fillBody(body, i)
				q := url.Values{"queue": {strconv.FormatInt(i%4, 10)}, "tags": {"demo"}, "keys": {"k" + strconv.FormatInt(i, 10)}}
				ans, err := c.put(wctx, "DemoTopic", q, nil, body)
				if err == nil && ans.Status != "PUT_OK" && d.o.Replication == "async" {
					err = fmt.Errorf("unexpected status %s", ans.Status)
				}
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("message %d: %w", i, err) })
					cancel()
					return
				}
				done.Add(1)
				bytesDone.Add(int64(len(body)))
			}
		}()
	}
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		close(finished)
	}()
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastLine := time.Time{}
	for {
		select {
		case <-finished:
		case <-tick.C:
			if d.tty || time.Since(lastLine) >= time.Second {
				d.drawWrite(ctx, done.Load(), bytesDone.Load(), time.Since(start), false)
				lastLine = time.Now()
			}
			continue
		}
		break
	}
	if firstErr != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if d.tty {
			fmt.Fprintln(d.progress)
		}
		return 0, firstErr
	}
	d.drawWrite(ctx, done.Load(), bytesDone.Load(), time.Since(start), true)
	return bytesDone.Load(), nil
}

// fillBody writes a readable, message-specific pattern into b.
func fillBody(b []byte, i int64) {
	pat := []byte(fmt.Sprintf("message %d of the replicator demo. ", i))
	for off := 0; off < len(b); off += copy(b[off:], pat) {
	}
}

// offsets reads the slave's max offset, then the master's: the master's
// only grows, so the lag shown is never negative.
func (d *demo) offsets(ctx context.Context) (m, s int64) {
	if st, err := d.sc.status(ctx); err == nil {
		s = st.MaxOffset
	}
	if st, err := d.mc.status(ctx); err == nil {
		m = st.MaxOffset
	}
	return m, s
}

func (d *demo) drawWrite(ctx context.Context, done, bytesDone int64, el time.Duration, final bool) {
	m, s := d.offsets(ctx)
	frac := float64(done) / float64(d.o.Messages)
	const width = 30
	fill := int(frac * width)
	bar := strings.Repeat("#", fill) + strings.Repeat(".", width-fill)
	rate := 0.0
	if el > 0 {
		rate = float64(bytesDone) / (1 << 20) / el.Seconds()
	}
	line := fmt.Sprintf("writing [%s] %3.0f%% %d/%d msgs %6.1f MiB/s | master %s  slave %s  lag %s",
		bar, frac*100, done, d.o.Messages, rate, humanBytes(m), humanBytes(s), humanBytes(m-s))
	d.line(line, final)
}

// line draws a progress line: rewritten in place on a terminal, one line
// per call otherwise.
func (d *demo) line(s string, final bool) {
	if d.tty {
		fmt.Fprintf(d.progress, "\r\033[K%s", s)
		if final {
			fmt.Fprintln(d.progress)
		}
		return
	}
	fmt.Fprintln(d.progress, s)
}

// catchUp waits until the slave's max offset equals the master's, drawing
// both; it returns how long that took.
func (d *demo) catchUp(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(demoCatchUpTimeout)
	lastLine := time.Time{}
	for {
		sst, err := d.sc.status(ctx)
		if err != nil {
			return 0, fmt.Errorf("slave status: %w", err)
		}
		mst, err := d.mc.status(ctx)
		if err != nil {
			return 0, fmt.Errorf("master status: %w", err)
		}
		lag := mst.MaxOffset - sst.MaxOffset
		if lag == 0 {
			d.line(fmt.Sprintf("slave caught up: master %d  slave %d  lag 0 B", mst.MaxOffset, sst.MaxOffset), true)
			return time.Since(start), nil
		}
		if sst.Master != nil && sst.Master.SegmentError != "" {
			return 0, fmt.Errorf("the slave reports a segment error: %s", sst.Master.SegmentError)
		}
		if d.tty || time.Since(lastLine) >= time.Second {
			d.line(fmt.Sprintf("catching up: master %d  slave %d  lag %s", mst.MaxOffset, sst.MaxOffset, humanBytes(lag)), false)
			lastLine = time.Now()
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-d.slave.Done():
			return 0, d.slave.Exited()
		case <-time.After(demoPoll):
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the slave did not catch up within %s (lag %d bytes)", demoCatchUpTimeout, lag)
		}
	}
}

type verifyResult struct {
	files    int
	bytes    int64
	min, max int64
	sum      string
}

// verify compares the written part of every segment file of the two commit
// logs byte for byte.
func (d *demo) verify(ctx context.Context) (verifyResult, error) {
	mst, err := d.mc.status(ctx)
	if err != nil {
		return verifyResult{}, err
	}
	sst, err := d.sc.status(ctx)
	if err != nil {
		return verifyResult{}, err
	}
	if mst.MaxOffset != sst.MaxOffset || mst.MinOffset != sst.MinOffset {
		return verifyResult{}, fmt.Errorf("offsets differ: master [%d, %d), slave [%d, %d)", mst.MinOffset, mst.MaxOffset, sst.MinOffset, sst.MaxOffset)
	}
	return compareCommitLogs(filepath.Join(d.dir, "master", node.CommitLogDir), filepath.Join(d.dir, "slave", node.CommitLogDir), mst.MinOffset, mst.MaxOffset, mst.SegmentSize)
}

// compareCommitLogs checks that two commit-log directories hold the same
// bytes in [min, max): every segment file (named by its 20-digit start
// offset) that overlaps the range must exist in both and match over the
// overlap.
func compareCommitLogs(a, b string, min, max, segSize int64) (verifyResult, error) {
	res := verifyResult{min: min, max: max}
	segsA, err := commitlog.SegmentStarts(a)
	if err != nil {
		return res, err
	}
	segsB, err := commitlog.SegmentStarts(b)
	if err != nil {
		return res, err
	}
	h := sha256.New()
	for _, start := range segsA {
		if start+segSize <= min || start >= max {
			continue
		}
		name := store.SegmentName(start)
		if !slices.Contains(segsB, start) {
			return res, fmt.Errorf("segment %s is missing in %s", name, b)
		}
		lo, hi := maxInt(min, start)-start, minInt(max, start+segSize)-start
		da, err := readRange(filepath.Join(a, name), lo, hi)
		if err != nil {
			return res, err
		}
		db, err := readRange(filepath.Join(b, name), lo, hi)
		if err != nil {
			return res, err
		}
		if !bytes.Equal(da, db) {
			i := 0
			for i < len(da) && da[i] == db[i] {
				i++
			}
			return res, fmt.Errorf("segment %s differs at offset %d", name, start+lo+int64(i))
		}
		h.Write(da)
		res.files++
		res.bytes += hi - lo
	}
	if res.bytes != max-min {
		return res, fmt.Errorf("the segment files of %s cover %d bytes of [%d, %d)", a, res.bytes, min, max)
	}
	res.sum = hex.EncodeToString(h.Sum(nil))
	return res, nil
}

func readRange(path string, lo, hi int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, hi-lo)
	if _, err := f.ReadAt(buf, lo); err != nil {
		return nil, fmt.Errorf("reading %s [%d, %d): %w", path, lo, hi, err)
	}
	return buf, nil
}

func maxInt(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func minInt(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}

func (d *demo) summary() {
	w := d.e.stdout
	if !d.o.Keep {
		// The nodes stop right after this: no URL of theirs would answer.
		fmt.Fprintf(w, "\nThe demo stops both nodes and removes %s now. Run 'replicator demo --keep' to keep\nthe data and the logs and get the commands that start the nodes again, with where to look then.\n", d.dir)
		return
	}
	fmt.Fprintf(w, "\nThe nodes are stopped; their data and logs are kept (master, then slave):\n")
	fmt.Fprintf(w, "  data      %s  %s\n", filepath.Join(d.dir, "master"), filepath.Join(d.dir, "slave"))
	fmt.Fprintf(w, "  logs      %s  %s\n", d.master.Log(), d.slave.Log())
	fmt.Fprintf(w, "Start them again with:\n  %s %s &\n  %s %s &\n", d.exe, strings.Join(d.mArgs, " "), d.exe, strings.Join(d.sArgs, " "))
	fmt.Fprintf(w, "then look at (master, then slave):\n")
	fmt.Fprintf(w, "  status    %s/v1/status  %s/v1/status  (or: replicator status --api URL --wait-ready)\n", d.mAPI, d.sAPI)
	fmt.Fprintf(w, "  metrics   %s/metrics  %s/metrics\n", d.mAPI, d.sAPI)
	fmt.Fprintf(w, "  messages  replicator tail --api %s\n", d.sAPI)
}

// stopChildren stops the children in order (nil ones skipped; SIGKILL
// after demoStopTimeout) and returns the errors of those that did not exit
// cleanly, naming their logs.
func stopChildren(cs ...*childproc.Proc) []error {
	var errs []error
	for _, c := range cs {
		if c == nil {
			continue
		}
		if err := c.Stop(demoStopTimeout); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// cleanup stops the children and removes the directory (unless --keep).
func (d *demo) cleanup() error {
	errs := stopChildren(d.slave, d.master)
	if d.dir != "" && !d.o.Keep {
		if err := os.RemoveAll(d.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
