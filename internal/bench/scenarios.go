package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/benchload"
	"github.com/replicatorhq/replicator/internal/pluginhost"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
)

// prepareCatchup writes the master's log once (builtin store; the external
// one reads the same files).
func (r *runner) prepareCatchup(ctx context.Context) error {
	if r.catchDir != "" {
		return nil
	}
	seg := r.cfg.SegmentSize
	if seg == 0 {
		seg = catchupSegment(r.cfg.Size)
	}
	dir := filepath.Join(r.dir, "catchup-master")
	f, err := pluginhost.Builtin().Store("commitlog")
	if err != nil {
		return err
	}
	st, err := f(dir, pluginhost.StoreOptions{SegmentSize: seg})
	if err != nil {
		return fmt.Errorf("opening the master's log: %w", err)
	}
	r.progress("catchup: writing the master's log: %s in %s segments", mib(r.cfg.Size), mib(seg))
	stopProgress := r.every(2*time.Second, func(el time.Duration) {
		n := st.Bounds().Max
		r.progress("catchup: writing the master's log: %s of %s (%.0f MB/s)", mib(n), mib(r.cfg.Size), float64(n)/el.Seconds()/1e6)
	})
	total, err := benchload.Fill(ctx, st, r.cfg.Size)
	stopProgress()
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	r.catchDir, r.catchMax, r.catchSeg = dir, total, seg
	return nil
}

// every calls f(elapsed) every d until the returned function is called.
func (r *runner) every(d time.Duration, f func(time.Duration)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f(time.Since(start))
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

func mib(n int64) string {
	if n >= 1<<30 && n%(1<<30) == 0 {
		return fmt.Sprintf("%d GiB", n>>30)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// catchup runs the catch-up scenario via via on store kind.
func (r *runner) catchup(ctx context.Context, via, kind string) error {
	if err := r.prepareCatchup(ctx); err != nil {
		return err
	}
	total, seg := r.catchMax, r.catchSeg
	base := Result{Scenario: Catchup, Store: kind, Via: via, SizeBytes: ptr(total), SegmentSize: seg}
	var runs []run
	var err error
	if via == ViaLibrary {
		runs, err = r.catchupLibrary(ctx, kind, total, seg)
	} else {
		runs, err = r.catchupAPI(ctx, kind, total, seg)
	}
	if err != nil {
		return err
	}
	res := r.summarize(base, runs)
	cpuText := ""
	if res.MasterCPUPerKB != nil && res.SlaveCPUPerKB != nil {
		cpuText = fmt.Sprintf("; CPU ns/KB master %.0f slave %.0f", *res.MasterCPUPerKB, *res.SlaveCPUPerKB)
	}
	r.progress("catchup via %s, %s store: %.0f MB/s = %.0f%% of loopback TCP (%.0f MB/s)%s", via, kind, *res.MBPerS, 100**res.RatioToLimit, *res.LimitMBPerS, cpuText)
	r.emit(res)
	return nil
}

// beforeRun waits for a quiet machine and measures raw loopback for the
// catch-up's bytes.
func (r *runner) beforeCatchupRun(ctx context.Context, total int64) (busy, raw float64, err error) {
	busy = r.waitQuiet(ctx)
	raw, err = benchload.RawLoopback(ctx, total)
	return busy, raw, err
}

func (r *runner) catchupLibrary(ctx context.Context, kind string, total, seg int64) ([]run, error) {
	op, err := r.newOpener(kind)
	if err != nil {
		return nil, err
	}
	defer op.close()
	mst, mPids, err := op.open(r.catchDir, seg)
	if err != nil {
		return nil, fmt.Errorf("opening the master's store: %w", err)
	}
	defer mst.Close()
	if got := mst.Bounds().Max; got != total {
		return nil, fmt.Errorf("the master's log holds %d bytes, want %d", got, total)
	}
	tr := tcptransport.New(tcptransport.DefaultOptions())
	m, err := core.NewMaster(mst, tr, core.MasterConfig{ListenAddr: "127.0.0.1:0", StartFromFirstSegment: true})
	if err != nil {
		return nil, err
	}
	if err := m.Start(); err != nil {
		return nil, err
	}
	defer m.Close()
	var runs []run
	for i := range r.cfg.Runs {
		busy, raw, err := r.beforeCatchupRun(ctx, total)
		if err != nil {
			return nil, err
		}
		sdir := filepath.Join(r.dir, fmt.Sprintf("catchup-slave-%d", i))
		sst, sPids, err := op.open(sdir, seg)
		if err != nil {
			return nil, fmt.Errorf("opening the slave's store: %w", err)
		}
		g := memGroups{self: pidsOf(0)}
		if len(mPids) > 0 {
			g.masterPlugin, g.slavePlugin = pidsOf(mPids...), pidsOf(sPids...)
		}
		mem := startMem(g)
		stopProf := r.startProfile(fmt.Sprintf("catchup-library-%s-run%d", kind, i+1))
		stopProgress := r.every(time.Second, func(el time.Duration) {
			n := sst.Bounds().Max
			r.progress("catchup via library, %s store, run %d: %s of %s (%.0f MB/s)", kind, i+1, mib(n), mib(total), float64(n)/el.Seconds()/1e6)
		})
		el, err := benchload.CatchUpOnce(ctx, m.Addr(), tr, sst, total)
		stopProgress()
		stopProf()
		x := run{mem: mem.stop(), busy: busy, limit: raw, hasLimit: true}
		sst.Close()
		os.RemoveAll(sdir)
		if err != nil {
			return nil, err
		}
		x.bytes, x.elapsed = total, el
		x.mbps = float64(total) / el.Seconds() / 1e6
		r.progress("catchup via library, %s store, run %d: %.0f MB/s in %s; raw loopback %.0f MB/s", kind, i+1, x.mbps, el.Round(time.Millisecond), raw)
		runs = append(runs, x)
	}
	return runs, nil
}

func (r *runner) catchupAPI(ctx context.Context, kind string, total, seg int64) ([]run, error) {
	master, ha, err := r.startMaster(ctx, kind, r.catchDir, "async", seg)
	if err != nil {
		return nil, err
	}
	mc := newAPIClient(master.api, 1)
	defer mc.close()
	defer master.stop()
	if st, err := mc.status(ctx); err != nil {
		return nil, err
	} else if st.MaxOffset != total {
		return nil, fmt.Errorf("the master holds %d bytes, want %d", st.MaxOffset, total)
	}
	var runs []run
	for i := range r.cfg.Runs {
		busy, raw, err := r.beforeCatchupRun(ctx, total)
		if err != nil {
			return nil, err
		}
		sdir := filepath.Join(r.dir, fmt.Sprintf("catchup-slave-%d", i))
		x, err := r.catchupAPIRun(ctx, kind, sdir, master, ha, total, seg, i)
		os.RemoveAll(sdir)
		if err != nil {
			return nil, err
		}
		x.busy, x.limit, x.hasLimit = busy, raw, true
		r.progress("catchup via api, %s store, run %d: %.0f MB/s (%s in %s); raw loopback %.0f MB/s%s", kind, i+1, x.mbps, mib(x.bytes), x.elapsed.Round(time.Millisecond), raw, x.catchCPUText())
		runs = append(runs, x)
	}
	return runs, nil
}

// Status polls during a catch-up via the API: at most catchupPollMax
// apart, and closer as the end nears (see catchupPoll).
const (
	catchupPollMin = time.Millisecond
	catchupPollMax = 10 * time.Millisecond
)

// catchupPoll is the wait before the next status poll of a catch-up that
// the slave has answered first at t0 holding o0 bytes and holds cur of
// total at now: a quarter of the time the rest takes at the rate seen so
// far, within [catchupPollMin, catchupPollMax]. The end is seen within
// about a millisecond, while the slave answers tens of requests per GiB
// rather than one every 2 ms: each answer is CPU taken from the catch-up
// it measures, in the slave and in this process (docs/benchmarks.md).
// Before the first answer it is catchupPollMin.
func catchupPoll(t0, now time.Time, o0, cur, total int64) time.Duration {
	el := now.Sub(t0)
	if t0.IsZero() || el <= 0 {
		return catchupPollMin
	}
	if cur <= o0 {
		return catchupPollMax
	}
	rest := time.Duration(float64(el) * float64(total-cur) / float64(cur-o0))
	return min(max(rest/4, catchupPollMin), catchupPollMax)
}

// catchupAPIRun starts a fresh slave and polls its status until it holds
// total bytes. The rate is taken from the first status answer (the slave
// may have started replicating before its API answered) to the first that
// shows the whole log, over the bytes in between.
func (r *runner) catchupAPIRun(ctx context.Context, kind, sdir string, master *child, ha string, total, seg int64, i int) (run, error) {
	slave, err := r.startSlave(ctx, kind, sdir, master, ha, seg)
	if err != nil {
		return run{}, err
	}
	defer slave.stop()
	sc := newAPIClient(slave.api, 1)
	defer sc.close()
	mem := startMem(memGroups{
		master: pidsOf(master.Pid()), slave: pidsOf(slave.Pid()),
		masterPlugin: childrenPids(master.Pid()), slavePlugin: childrenPids(slave.Pid()),
	})
	name := fmt.Sprintf("catchup-api-%s-run%d", kind, i+1)
	stopProf := r.startProfile(name)
	defer stopProf()
	stopDaemons := func() {}
	defer func() { stopDaemons() }()
	started := time.Now()
	deadline := started.Add(childStartTimeout + time.Duration(total/(1<<20))*time.Second)
	var t0, lastLine time.Time
	var o0 int64
	var cpu0 cpuSample
	cpuGroups := memGroups{
		master: pidsOf(master.Pid()), slave: pidsOf(slave.Pid()),
		masterPlugin: childrenPids(master.Pid()), slavePlugin: childrenPids(slave.Pid()),
	}
	var lastOff int64 // the slave's max offset at the last answer
	for {
		st, err := sc.status(ctx)
		now := time.Now()
		if err == nil {
			lastOff = st.MaxOffset
		}
		switch {
		case err == nil && st.Master != nil && st.Master.SegmentError != "":
			mem.stop()
			return run{}, fmt.Errorf("the slave reports a segment error: %s", st.Master.SegmentError)
		case err == nil && t0.IsZero():
			t0, o0 = now, st.MaxOffset
			cpu0 = readCPU(cpuGroups)
			// The daemons' profiles start once the slave answers and cover
			// the catch-up at 500 MB/s or faster (and the idle time after
			// it, which adds few samples).
			stopDaemons = r.profileChildren(ctx, map[string]*child{"master": master, "slave": slave}, name, time.Duration(total/500e6+1)*time.Second)
		case err == nil && st.MaxOffset >= total:
			x := run{mem: mem.stop(), bytes: total - o0, elapsed: now.Sub(t0)}
			if x.bytes < total/2 {
				// The log was small enough to be mostly copied before the
				// slave's API answered: time it from the process start.
				r.progress("catchup via api: the slave held %s of %s at its first status answer; timing from its process start (use a larger --size)", mib(o0), mib(total))
				x.bytes, x.elapsed = total, now.Sub(started)
			}
			x.mbps = float64(x.bytes) / x.elapsed.Seconds() / 1e6
			if x.bytes == total-o0 {
				x.cpu, x.hasCatchCPU = readCPU(cpuGroups).perMessage(cpu0, x.bytes/1000), true
			}
			return x, nil
		case err == nil && now.Sub(lastLine) >= time.Second:
			lastLine = now
			r.progress("catchup via api, %s store, run %d: %s of %s", kind, i+1, mib(st.MaxOffset), mib(total))
		case err != nil && !errors.Is(err, errStatus):
			mem.stop()
			return run{}, err
		}
		select {
		case <-slave.Done():
			mem.stop()
			return run{}, slave.Exited()
		case <-master.Done():
			mem.stop()
			return run{}, master.Exited()
		case <-ctx.Done():
			mem.stop()
			return run{}, ctx.Err()
		case <-time.After(catchupPoll(t0, now, o0, lastOff, total)):
		}
		if now.After(deadline) {
			mem.stop()
			return run{}, fmt.Errorf("the slave did not catch up by %s (logs %s, %s)", deadline.Format(time.TimeOnly), master.Log(), slave.Log())
		}
	}
}

// load runs the sync or async scenario via via on store kind, one result
// per producer count.
func (r *runner) load(ctx context.Context, sc, via, kind string) error {
	seg := r.cfg.SegmentSize
	if seg == 0 {
		seg = DefaultSegmentSize
	}
	dir := filepath.Join(r.dir, fmt.Sprintf("%s-%s-%s", sc, via, kind))
	maxP := slices.Max(r.cfg.Producers)
	var cl cluster
	var err error
	r.progress("%s via %s, %s store: starting a master and a slave (%s segments)", sc, via, kind, mib(seg))
	if via == ViaLibrary {
		role := core.AsyncMaster
		if sc == Sync {
			role = core.SyncMaster
		}
		cl, err = r.newLibCluster(ctx, kind, dir, role, seg, maxP)
	} else if via == ViaClient {
		cl, err = r.newClientCluster(ctx, kind, dir, sc, seg, maxP)
	} else {
		cl, err = r.newAPICluster(ctx, kind, dir, sc, seg, maxP)
	}
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, p := range r.cfg.Producers {
		var runs []run
		for i := range r.cfg.Runs {
			x, err := r.loadRun(ctx, cl, sc, via, kind, p, i)
			if err != nil {
				cl.close()
				return err
			}
			runs = append(runs, x)
		}
		base := Result{Scenario: sc, Store: kind, Via: via, Producers: ptr(p), MsgSize: ptr(r.cfg.MsgSize),
			DurationS: ptr(r.cfg.Duration.Seconds()), SegmentSize: seg}
		if sc == Async {
			base.MaxLag = ptr(r.cfg.MaxLag)
		}
		res := r.summarize(base, runs)
		lag := ""
		if res.LagP99Ms != nil {
			lag = fmt.Sprintf(", lag p99 %.3f ms", *res.LagP99Ms)
		}
		r.progress("%s via %s, %s store, %d producers: %.0f msgs/s, %.1f MB/s, p50 %.3f ms p99 %.3f ms%s%s", sc, via, kind, p, *res.MsgsPerS, *res.MBPerS, *res.P50Ms, *res.P99Ms, lag, res.cpuText())
		r.emit(res)
	}
	return cl.close()
}

// loadRun measures one point: warm-up, then Duration of load.
func (r *runner) loadRun(ctx context.Context, cl cluster, sc, via, kind string, p, i int) (run, error) {
	r.settle(ctx, cl.mem())
	busy := r.waitQuiet(ctx)
	if r.cfg.Warmup > 0 {
		st := benchload.Drive(ctx, benchload.Load{Producers: p, Duration: r.cfg.Warmup}, cl.put)
		if st.FirstErr != nil {
			return run{}, fmt.Errorf("warm-up: %w", st.FirstErr)
		}
	}
	mem := startMem(cl.mem())
	var lag *lagSampler
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if sc == Async {
		lag = newLagSampler(cl.waitSlave)
		lag.start(lctx)
	}
	load := benchload.Load{Producers: p, Duration: r.cfg.Duration}
	if lag != nil {
		load.OnPut = lag.onPut
	}
	name := fmt.Sprintf("%s-%s-%s-p%d-run%d", sc, via, kind, p, i+1)
	stopProf := r.startProfile(name)
	stopDaemons := r.profileDaemons(ctx, cl, name, r.cfg.Duration)
	cpu0 := readCPU(cl.mem())
	st := benchload.Drive(ctx, load, cl.put)
	cpu1 := readCPU(cl.mem())
	stopProf()
	stopDaemons()
	var lags []time.Duration
	var lagErr error
	if lag != nil {
		lags, lagErr = lag.finish(cancel)
	}
	x := run{mem: mem.stop(), busy: busy}
	if st.FirstErr != nil {
		return run{}, st.FirstErr
	}
	if lagErr != nil {
		return run{}, fmt.Errorf("lag sampler: %w", lagErr)
	}
	x.hasMsgs, x.hasLat = true, true
	x.messages, x.bytes, x.elapsed = st.Puts, st.Puts*int64(r.cfg.MsgSize), st.Elapsed
	x.msgsps = st.MsgsPerSec()
	x.mbps = x.msgsps * float64(r.cfg.MsgSize) / 1e6
	x.p50, x.p99, x.p999 = st.Percentile(0.5), st.Percentile(0.99), st.Percentile(0.999)
	x.notOK = st.NotOK
	x.cpu = cpu1.perMessage(cpu0, st.Puts)
	if lag != nil {
		x.hasLag = true
		x.lagSamples = len(lags)
		x.lagP50, x.lagP99 = benchload.Percentile(lags, 0.5), benchload.Percentile(lags, 0.99)
		if len(lags) > 0 {
			x.lagMax = lags[len(lags)-1]
		}
	}
	return x, nil
}

// lagSampler measures replication lag: every LagEvery it takes the next
// put that returns and waits until the slave holds it. A sample the slave
// does not hold when the run ends counts with the time it waited (a lower
// bound), so a growing backlog is reported rather than dropped.
type lagSampler struct {
	wait  func(context.Context, int64) (time.Time, error)
	want  atomic.Bool
	marks chan mark
	lags  []time.Duration
	err   error
	done  chan struct{}
}

type mark struct {
	next int64
	at   time.Time
}

func newLagSampler(wait func(context.Context, int64) (time.Time, error)) *lagSampler {
	return &lagSampler{wait: wait, marks: make(chan mark, 1), done: make(chan struct{})}
}

// onPut is benchload.Load.OnPut: one atomic load per put unless a sample
// is wanted.
func (s *lagSampler) onPut(_ int, next int64, at time.Time) {
	if s.want.Load() && s.want.CompareAndSwap(true, false) {
		select {
		case s.marks <- mark{next, at}:
		default:
		}
	}
}

func (s *lagSampler) start(ctx context.Context) {
	go func() {
		defer close(s.done)
		t := time.NewTicker(LagEvery)
		defer t.Stop()
		for {
			s.want.Store(true)
			var m mark
			select {
			case <-ctx.Done():
				return
			case m = <-s.marks:
			}
			seen, err := s.wait(ctx, m.next)
			if err != nil {
				if ctx.Err() == nil {
					s.err = err
					return
				}
				// The run ended before the slave held the sample: count
				// the time it has waited, a lower bound of its lag, so
				// that a backlog shows instead of vanishing.
				s.lags = append(s.lags, time.Since(m.at))
				return
			}
			s.lags = append(s.lags, max(0, seen.Sub(m.at)))
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// finish stops the sampler and returns its lags, sorted.
func (s *lagSampler) finish(cancel context.CancelFunc) ([]time.Duration, error) {
	cancel()
	<-s.done
	slices.Sort(s.lags)
	return s.lags, s.err
}

// waitQuiet waits (at most QuietMax) for the machine to be under QuietBusy
// percent busy and returns the last busy share seen.
func (r *runner) waitQuiet(ctx context.Context) float64 {
	if r.cfg.QuietMax < 0 {
		return 0
	}
	deadline := time.Now().Add(r.cfg.QuietMax)
	for {
		t0, i0, err := cpuTimes()
		if err != nil {
			return 0
		}
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(250 * time.Millisecond):
		}
		t1, i1, err := cpuTimes()
		if err != nil || t1 == t0 {
			return 0
		}
		busy := 100 * float64((t1-t0)-(i1-i0)) / float64(t1-t0)
		if busy <= r.cfg.QuietBusy {
			return busy
		}
		if time.Now().After(deadline) {
			r.progress("machine still %.0f%% busy after %s; measuring anyway", busy, r.cfg.QuietMax)
			return busy
		}
	}
}

// Settling: before a measurement the nodes must have finished their own
// start-up work (a new commit-log segment is preallocated and prefaulted in
// the background, which takes seconds for 1 GiB on a small machine).
const (
	settleWindow  = 500 * time.Millisecond
	settleMax     = 60 * time.Second
	settleMaxBusy = 0.10 // of one CPU, per process group
)

// settle waits (at most settleMax) until the processes of g use less than
// settleMaxBusy of a CPU each over settleWindow.
func (r *runner) settle(ctx context.Context, g memGroups) {
	if r.cfg.QuietMax < 0 {
		return
	}
	var groups []func() []int
	for _, f := range []func() []int{g.master, g.slave, g.masterPlugin, g.slavePlugin, g.self} {
		if f != nil {
			groups = append(groups, f)
		}
	}
	ticks := func() []int64 {
		out := make([]int64, len(groups))
		for i, f := range groups {
			for _, pid := range f() {
				if t, err := cpuTicks(pid); err == nil {
					out[i] += t
				}
			}
		}
		return out
	}
	start := time.Now()
	for {
		a := ticks()
		select {
		case <-ctx.Done():
			return
		case <-time.After(settleWindow):
		}
		b := ticks()
		busiest := 0.0
		for i := range a {
			busiest = max(busiest, float64(b[i]-a[i])/clockTicks/settleWindow.Seconds())
		}
		if busiest < settleMaxBusy {
			if el := time.Since(start); el > 2*settleWindow {
				r.progress("the nodes settled after %s", el.Round(100*time.Millisecond))
			}
			return
		}
		if time.Since(start) > settleMax {
			r.progress("the nodes still use %.0f%% of a CPU after %s; measuring anyway", 100*busiest, settleMax)
			return
		}
	}
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat CPU times (100 on
// every Linux architecture Go supports).
const clockTicks = 100

// profileDaemons fetches a CPU profile of d (whole seconds, at least 1)
// from the master and the slave child of an api cluster (started with
// --pprof) into ProfileDir as NAME.master.cpu.pprof and NAME.slave.cpu.pprof;
// the returned function waits for both. Library clusters are in this
// process: startProfile covers them.
func (r *runner) profileDaemons(ctx context.Context, cl cluster, name string, d time.Duration) func() {
	ac, ok := cl.(*apiCluster)
	if cc, isClient := cl.(*clientCluster); isClient {
		ac, ok = cc.apiCluster, true
	}
	if r.cfg.ProfileDir == "" || !ok {
		return func() {}
	}
	return r.profileChildren(ctx, map[string]*child{"master": ac.master, "slave": ac.slave}, name, d)
}

// profileChildren fetches a CPU profile of d (whole seconds, at least 1)
// from each child (started with --pprof) into ProfileDir as
// NAME.ROLE.cpu.pprof; the returned function waits for them.
func (r *runner) profileChildren(ctx context.Context, children map[string]*child, name string, d time.Duration) func() {
	if r.cfg.ProfileDir == "" {
		return func() {}
	}
	secs := max(1, int(d.Round(time.Second)/time.Second))
	var wg sync.WaitGroup
	for role, c := range children {
		wg.Go(func() {
			path := filepath.Join(r.cfg.ProfileDir, name+"."+role+".cpu.pprof")
			if err := fetchProfile(ctx, c.api, secs, path); err != nil {
				r.progress("profile %s of the %s: %v", name, role, err)
			}
		})
	}
	return wg.Wait
}

// fetchProfile saves GET base/debug/pprof/profile?seconds=secs to path.
func fetchProfile(ctx context.Context, base string, secs int, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// startProfile starts a CPU profile named name in ProfileDir; the returned
// function stops it and writes the allocation profile beside it.
func (r *runner) startProfile(name string) func() {
	if r.cfg.ProfileDir == "" {
		return func() {}
	}
	base := filepath.Join(r.cfg.ProfileDir, name)
	f, err := os.Create(base + ".cpu.pprof")
	if err != nil {
		r.progress("profile %s: %v", name, err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		r.progress("profile %s: %v", name, err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		runtime.GC()
		af, err := os.Create(base + ".allocs.pprof")
		if err != nil {
			r.progress("profile %s: %v", name, err)
			return
		}
		defer af.Close()
		if err := pprof.Lookup("allocs").WriteTo(af, 0); err != nil {
			r.progress("profile %s: %v", name, err)
		}
	}
}
