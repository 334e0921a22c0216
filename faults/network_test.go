package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/internal/proctest"
)

// netRig is a sync master and a slave that reaches the master's HA port
// through an embedded toxiproxy.
type netRig struct {
	seed       uint64
	mdir, sdir string
	m, s       *proctest.Proc
	np         *netProxy
}

func newNetRig(t *testing.T, seed uint64, slaveTimeout string) *netRig {
	t.Helper()
	dir := t.TempDir()
	r := &netRig{seed: seed, mdir: filepath.Join(dir, "m"), sdir: filepath.Join(dir, "s")}
	r.m = proctest.StartMaster(t, bin, r.mdir, "--replication", "sync", "--slave-timeout", slaveTimeout,
		"--segment-size", segSizeArg, "--max-message-size", maxMsgArg)
	r.np = newNetProxy(t, r.m.HA)
	r.s = proctest.StartSlave(t, bin, r.sdir, r.np.Addr, r.m.API, "--segment-size", segSizeArg)
	waitSlaves(t, r.m, 1)
	return r
}

// checkPrefix checks, while both run, that the slave's log is a
// byte-identical prefix of the master's.
func (r *netRig) checkPrefix(t *testing.T) int64 {
	t.Helper()
	ss := status(t, r.s.API)
	if ms := status(t, r.m.API); ss.MaxOffset > ms.MaxOffset {
		t.Fatalf("the slave (max %d) is ahead of the master (max %d)", ss.MaxOffset, ms.MaxOffset)
	}
	compareDirs(t, r.mdir, r.sdir, ss.MinOffset, ss.MaxOffset)
	return ss.MaxOffset
}

// finish stops p, waits for the slave to catch up, checks every PUT_OK of
// p on the slave and compares both logs, then stops both nodes. It
// returns p's answers by status, the PUT_OK answers verified and the
// bytes compared.
func (r *netRig) finish(t *testing.T, p *producer) (byState map[string]int, verified int, bytes int64) {
	t.Helper()
	if p != nil {
		p.halt()
	}
	ms := waitCaughtUp(t, r.m, r.s)
	if p != nil {
		acks, st, _ := p.snapshot()
		n, err := verifyOnNode(context.Background(), r.seed, r.s.API, acks, true)
		if err != nil {
			t.Fatal(err)
		}
		byState, verified = st, n
	}
	r.s.Stop()
	r.m.Stop()
	compareDirs(t, r.mdir, r.sdir, ms.MinOffset, ms.MaxOffset)
	return byState, verified, ms.MaxOffset - ms.MinOffset
}

// reconnects returns the slave's reconnect count.
func (r *netRig) reconnects(t *testing.T) int64 {
	t.Helper()
	st := status(t, r.s.API)
	if st.Master == nil {
		t.Fatalf("slave status without master link: %+v", st)
	}
	return st.Master.Reconnects
}

// TestNetworkFaults runs master-slave replication through toxiproxy on
// loopback with latency, a bandwidth limit, connection resets, a stalled
// link, a silent partition that heals and a hard partition that heals.
// The slave is always a byte-identical prefix of the master and ends
// byte-identical; sync puts give FLUSH_SLAVE_TIMEOUT while the link is
// silent and PUT_OK after it heals.
func TestNetworkFaults(t *testing.T) {
	t.Parallel()
	for _, seed := range seeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Run("latency", func(t *testing.T) { t.Parallel(); netLatency(t, seed) })
			t.Run("bandwidth", func(t *testing.T) { t.Parallel(); netBandwidth(t, seed) })
			t.Run("reset", func(t *testing.T) { t.Parallel(); netReset(t, seed) })
			t.Run("stall", func(t *testing.T) { t.Parallel(); netStall(t, seed) })
			t.Run("partition", func(t *testing.T) { t.Parallel(); netPartition(t, seed, false) })
			t.Run("partition-hard", func(t *testing.T) { t.Parallel(); netPartition(t, seed, true) })
		})
	}
}

func netLatency(t *testing.T, seed uint64) {
	r := newNetRig(t, seed, "5s")
	rng := rand.New(rand.NewPCG(seed, 1))
	lat, jit := 10+rng.IntN(40), 5+rng.IntN(10)
	r.np.both("lat", "latency", fmt.Sprintf(`{"latency":%d,"jitter":%d}`, lat, jit))
	p := startProducer(t, seed, r.m.API, 3)
	p.waitOKs(t, quota(60, 300))
	r.checkPrefix(t)
	r.np.removeBoth("lat")
	p.waitOKs(t, p.oks()+20)
	p.halt()
	_, byState, errs := p.snapshot()
	if byState["PUT_OK"] != sum(byState) || errs != 0 {
		t.Fatalf("with %d±%d ms latency and a 5 s slave timeout every sync put should be PUT_OK: %v, %d errors", lat, jit, byState, errs)
	}
	_, n, b := r.finish(t, p)
	result(t, "latency=%d±%dms each way put_ok=%d verified_on_slave=%d bytes=%d losses=0", lat, jit, byState["PUT_OK"], n, b)
}

func netBandwidth(t *testing.T, seed uint64) {
	r := newNetRig(t, seed, "5s")
	const rate = 256 // KB/s
	r.np.add("bw", "bandwidth", "downstream", fmt.Sprintf(`{"rate":%d}`, rate))
	p := startProducer(t, seed, r.m.API, 3)
	start := status(t, r.s.API).MaxOffset
	t0 := time.Now()
	p.waitOKs(t, quota(60, 300))
	el := time.Since(t0)
	got := r.checkPrefix(t) - start
	r.np.remove("bw")
	p.waitOKs(t, p.oks()+20)
	byState, n, b := r.finish(t, p)
	result(t, "rate=%dKB/s observed=%.0fKB/s put_ok=%d answers=%v verified_on_slave=%d bytes=%d losses=0",
		rate, float64(got)/1024/el.Seconds(), byState["PUT_OK"], byState, n, b)
}

func netReset(t *testing.T, seed uint64) {
	r := newNetRig(t, seed, "1s")
	rng := rand.New(rand.NewPCG(seed, 3))
	p := startProducer(t, seed, r.m.API, 3)
	resets := 3
	if long() {
		resets = 15
	}
	for k := range resets {
		p.waitOKs(t, p.oks()+5+rng.IntN(50))
		before := r.reconnects(t)
		name := fmt.Sprintf("reset%d", k)
		r.np.add(name, "reset_peer", []string{"upstream", "downstream"}[rng.IntN(2)], fmt.Sprintf(`{"timeout":%d}`, rng.IntN(200)))
		proctest.Eventually(t, "slave reconnects after a reset", proctest.WaitTimeout, func() error {
			if got := r.reconnects(t); got <= before {
				return fmt.Errorf("reconnects %d", got)
			}
			return nil
		})
		r.checkPrefix(t)
		r.np.remove(name)
	}
	p.waitOKs(t, p.oks()+20)
	reconn := r.reconnects(t)
	byState, n, b := r.finish(t, p)
	result(t, "resets=%d slave_reconnects=%d answers=%v verified_on_slave=%d bytes=%d losses=0", resets, reconn, byState, n, b)
}

// netStall: toxiproxy's timeout toxic drops everything in both directions
// and closes a connection after 1.5 s without data. Sync puts are never
// PUT_OK while it lasts; once the old connection is gone the toxic is
// removed and puts are PUT_OK again.
func netStall(t *testing.T, seed uint64) {
	r := newNetRig(t, seed, "500ms")
	body := func(i int) []byte { _, b := message(seed, 99, i); return b }
	for i := range 5 {
		if a, err := putOne(t, r.m.API, "Stall", body(i)); err != nil || a.Status != "PUT_OK" {
			t.Fatalf("before the stall: %+v %v", a, err)
		}
	}
	before := r.reconnects(t)
	r.np.both("stall", "timeout", `{"timeout":1500}`)
	states := map[string]int{}
	i := 5
	proctest.Eventually(t, "the stalled connection closed", proctest.WaitTimeout, func() error {
		a, err := putOne(t, r.m.API, "Stall", body(i))
		i++
		if err != nil {
			t.Fatalf("put while stalled: %v", err)
		}
		states[a.Status]++
		if a.Status == "PUT_OK" {
			t.Fatalf("PUT_OK while the link is stalled: %+v", a)
		}
		if r.reconnects(t) <= before || states["FLUSH_SLAVE_TIMEOUT"] == 0 {
			return fmt.Errorf("reconnects %d, answers %v", r.reconnects(t), states)
		}
		return nil
	})
	r.checkPrefix(t)
	r.np.removeBoth("stall")
	healed := time.Now()
	proctest.Eventually(t, "PUT_OK after the stall", proctest.WaitTimeout, func() error {
		a, err := putOne(t, r.m.API, "Stall", body(i))
		i++
		if err != nil {
			return err
		}
		if a.Status != "PUT_OK" {
			return fmt.Errorf("answer %s", a.Status)
		}
		return nil
	})
	_, _, b := r.finish(t, nil)
	result(t, "answers_while_stalled=%v first_put_ok_after=%s bytes=%d losses=0", states, time.Since(healed).Round(time.Millisecond), b)
}

// netPartition: silent (a latency toxic of an hour holds every byte in
// both directions, as a partition does to TCP: nothing is lost, nothing
// arrives) or hard (the proxy closes every connection and refuses new
// ones). While it lasts, sync puts are FLUSH_SLAVE_TIMEOUT (silent: the
// master still counts the connected slave) or SLAVE_NOT_AVAILABLE (hard:
// no slave connected); after healing they are PUT_OK.
func netPartition(t *testing.T, seed uint64, hard bool) {
	r := newNetRig(t, seed, "500ms")
	body := func(i int) []byte { _, b := message(seed, 98, i); return b }
	want := "FLUSH_SLAVE_TIMEOUT"
	puts := 4
	if long() {
		puts = 12
	}
	for i := range 5 {
		if a, err := putOne(t, r.m.API, "Part", body(i)); err != nil || a.Status != "PUT_OK" {
			t.Fatalf("before the partition: %+v %v", a, err)
		}
	}
	if hard {
		want = "SLAVE_NOT_AVAILABLE"
		r.np.disable()
		waitSlaves(t, r.m, 0)
	} else {
		r.np.both("part", "latency", `{"latency":3600000}`)
	}
	i := 5
	for range puts {
		a, err := putOne(t, r.m.API, "Part", body(i))
		i++
		if err != nil || a.Status != want {
			t.Fatalf("put %d during the partition: %+v %v, want %s", i, a, err, want)
		}
	}
	r.checkPrefix(t)
	if hard {
		r.np.enable()
	} else {
		r.np.removeBoth("part")
	}
	healed := time.Now()
	proctest.Eventually(t, "PUT_OK after healing", proctest.WaitTimeout, func() error {
		a, err := putOne(t, r.m.API, "Part", body(i))
		i++
		if err != nil {
			return err
		}
		if a.Status != "PUT_OK" {
			return fmt.Errorf("answer %s", a.Status)
		}
		return nil
	})
	reconn := r.reconnects(t)
	_, _, b := r.finish(t, nil)
	result(t, "hard=%v puts_during_partition=%d all_%s first_put_ok_after=%s slave_reconnects=%d bytes=%d losses=0",
		hard, puts, want, time.Since(healed).Round(time.Millisecond), reconn, b)
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
