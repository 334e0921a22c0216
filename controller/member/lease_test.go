package member

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/replicatorhq/replicator/controller"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/core/epoch"
	"github.com/replicatorhq/replicator/plugins/commitlog"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// TestKeeperFencesAtDeadline: renewals succeed twice, then hang (etcd
// unreachable): the keeper expires exactly FenceAfter after the send time
// of the last successful renewal, while the hanging renewal still runs.
func TestKeeperFencesAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const after = 500 * time.Millisecond
		start := time.Now()
		g := newGuard(time.Now, after)
		g.renewed(start)
		var calls atomic.Int32
		type expiry struct {
			at     time.Time
			reason error
		}
		fired := make(chan expiry, 1)
		k := &keeper{g: g, interval: 100 * time.Millisecond,
			renew: func(ctx context.Context) error {
				if calls.Add(1) <= 2 {
					return nil
				}
				<-ctx.Done()
				return ctx.Err()
			},
			expired: func(r error) { fired <- expiry{time.Now(), r} },
			failed:  func(error) {}}
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() { k.run(ctx) })
		time.Sleep(699 * time.Millisecond)
		select {
		case e := <-fired:
			t.Fatalf("expired at %v, before the deadline", e.at.Sub(start))
		default:
		}
		if !g.valid() {
			t.Fatal("not valid before the deadline")
		}
		e := <-fired
		// Last success: the renewal sent at 200 ms; deadline 700 ms.
		if got := e.at.Sub(start); got != 700*time.Millisecond {
			t.Fatalf("expired at %v, want 700ms", got)
		}
		if !errors.Is(e.reason, ErrLeaseExpired) || g.valid() {
			t.Fatalf("reason %v, valid %v", e.reason, g.valid())
		}
		cancel()
		wg.Wait()
	})
}

// TestKeeperLeaseGone: etcd answers that the lease does not exist: the
// keeper expires at once, not at the deadline.
func TestKeeperLeaseGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		g := newGuard(time.Now, time.Second)
		g.renewed(start)
		done := make(chan error, 1)
		k := &keeper{g: g, interval: 100 * time.Millisecond,
			renew:   func(context.Context) error { return errLeaseGone },
			expired: func(r error) { done <- r },
			failed:  func(error) {}}
		k.run(t.Context())
		r := <-done
		if !errors.Is(r, ErrLeaseExpired) || !errors.Is(r, errLeaseGone) {
			t.Fatalf("reason %v", r)
		}
		if got := time.Since(start); got != 100*time.Millisecond {
			t.Fatalf("expired after %v, want 100ms (the first renewal)", got)
		}
		if g.valid() {
			t.Fatal("guard still valid")
		}
	})
}

// fakeClock is a monotonic clock moved by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// guardedMaster is a Member around a real master replica (real commit log
// and TCP listener) whose lease guard runs on a fake clock, with no etcd:
// the put-time checks alone.
func guardedMaster(t *testing.T, clk *fakeClock) (*Member, *core.Replica, func() int64) {
	t.Helper()
	dir := t.TempDir()
	l := openLog(t, dir)
	ep, err := epoch.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := core.NewReplica(core.ReplicaConfig{Store: l, Transport: tcptransport.New(tcptransport.DefaultOptions()), Epochs: ep,
		BrokerID: 1, Master: core.MasterConfig{ListenAddr: "127.0.0.1:0", Role: core.SyncMaster}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rep.Close(); l.Close() })
	if _, err := rep.BecomeMaster(1); err != nil {
		t.Fatal(err)
	}
	met, err := newMetrics(nil, "g", 1)
	if err != nil {
		t.Fatal(err)
	}
	m := &Member{rep: rep, met: met, g: newGuard(clk.Now, 500*time.Millisecond), putBatch: rep.PutBatch}
	return m, rep, func() int64 { return l.Bounds().Max }
}

// TestPutAfterPause: a master paused past its deadline (the fence timer
// has not run yet) refuses the put without storing it; a put during which
// the deadline passes answers an error, not PUT_OK.
func TestPutAfterPause(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	m, rep, maxOff := guardedMaster(t, clk)
	m.g.renewed(clk.Now())
	msg := &record.Message{Topic: "T", Body: []byte("hello")}
	clk.Add(499 * time.Millisecond)
	res, err := m.Put(context.Background(), msg)
	if err != nil || res.Status != core.PutOK {
		t.Fatalf("put within the deadline: %+v %v", res, err)
	}
	stored := maxOff()

	clk.Add(2 * time.Millisecond) // resumed after a pause: 501 ms since the send
	_, err = m.Put(context.Background(), msg)
	if !errors.Is(err, ErrLeaseExpired) || !errors.Is(err, core.ErrFenced) {
		t.Fatalf("put after the deadline: %v", err)
	}
	if maxOff() != stored {
		t.Fatalf("a refused put was stored: max %d, was %d", maxOff(), stored)
	}

	// A renewal; then the process pauses inside the put.
	m.g.renewed(clk.Now())
	m.putBatch = func(ctx context.Context, msgs []*record.Message) []core.BatchPut {
		out := rep.PutBatch(ctx, msgs)
		clk.Add(time.Second)
		return out
	}
	_, err = m.Put(context.Background(), msg)
	if !errors.Is(err, ErrLeaseExpired) || !errors.Is(err, core.ErrFenced) {
		t.Fatalf("put across the deadline answered %v", err)
	}
	if maxOff() == stored {
		t.Fatal("the put across the deadline should have reached the log (and not been acknowledged)")
	}
}

// TestPutBatchLease: Put's lease rules over a batch. Within the deadline
// the batch is stored and acknowledged; past it the whole batch is
// refused, not stored, each message counted as refused before; when the
// deadline passes while the batch runs, the stored message answers the
// lease error with its result and counts as refused during, while the
// ones the store refused keep their own errors.
func TestPutBatchLease(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	m, rep, maxOff := guardedMaster(t, clk)
	refused := func(when string) float64 { return testutil.ToFloat64(m.met.refused.WithLabelValues(when)) }
	small := func() *record.Message { return &record.Message{Topic: "T", Body: []byte("hello")} }
	ctx := context.Background()

	m.g.renewed(clk.Now())
	clk.Add(499 * time.Millisecond)
	out := m.PutBatch(ctx, []*record.Message{small(), small(), small()})
	for i, o := range out {
		if o.Err != nil || o.Status != core.PutOK || o.NextOffset == 0 {
			t.Fatalf("batch within the deadline: message %d: %+v %v", i, o.PutResult, o.Err)
		}
	}
	if len(out) != 3 || out[2].NextOffset != maxOff() || refused("before")+refused("during") != 0 {
		t.Fatalf("batch within the deadline: %d results ending at %d, max %d, refused %v/%v",
			len(out), out[len(out)-1].NextOffset, maxOff(), refused("before"), refused("during"))
	}
	stored := maxOff()

	clk.Add(2 * time.Millisecond) // resumed after a pause: 501 ms since the send
	out = m.PutBatch(ctx, []*record.Message{small(), small()})
	for i, o := range out {
		if !errors.Is(o.Err, ErrLeaseExpired) || !errors.Is(o.Err, core.ErrFenced) || o.NextOffset != 0 {
			t.Fatalf("batch after the deadline: message %d: %+v %v", i, o.PutResult, o.Err)
		}
	}
	if len(out) != 2 || maxOff() != stored || refused("before") != 2 {
		t.Fatalf("batch after the deadline: %d results, max %d (was %d), refused before %v", len(out), maxOff(), stored, refused("before"))
	}

	// A renewal; then the process pauses inside the batch, whose second
	// message is too large for the store (the third is not stored either).
	m.g.renewed(clk.Now())
	m.putBatch = func(ctx context.Context, msgs []*record.Message) []core.BatchPut {
		out := rep.PutBatch(ctx, msgs)
		clk.Add(time.Second)
		return out
	}
	huge := &record.Message{Topic: "T", Body: make([]byte, commitlog.DefaultMaxMessageSize)}
	out = m.PutBatch(ctx, []*record.Message{small(), huge, small()})
	if len(out) != 3 {
		t.Fatalf("%d results for 3 messages", len(out))
	}
	if o := out[0]; !errors.Is(o.Err, ErrLeaseExpired) || !errors.Is(o.Err, core.ErrFenced) || o.Offset != stored || o.NextOffset != maxOff() {
		t.Fatalf("stored message across the deadline: %+v %v (stored from %d, max %d)", o.PutResult, o.Err, stored, maxOff())
	}
	if !errors.Is(out[1].Err, store.ErrMessageTooLarge) || !errors.Is(out[2].Err, core.ErrBatchAborted) ||
		errors.Is(out[1].Err, ErrLeaseExpired) || errors.Is(out[2].Err, ErrLeaseExpired) {
		t.Fatalf("unstored messages across the deadline: %v; %v", out[1].Err, out[2].Err)
	}
	if refused("during") != 1 || refused("before") != 2 {
		t.Fatalf("refused during %v, before %v; want 1, 2", refused("during"), refused("before"))
	}
}

// proposerFunc adapts a function to core.SyncStateSetConfirmer.
type proposerFunc func(ctx context.Context, epoch int32, set []int64) ([]int64, error)

func (f proposerFunc) Propose(ctx context.Context, epoch int32, set []int64) ([]int64, error) {
	return f(ctx, epoch, set)
}

// TestConfirmer: no proposal leaves a master whose lease is not valid; a
// proposal whose outcome is unknown (an etcd error) is made again until
// the controller answers, or until the lease ends; the controller's
// refusal is answered at once.
func TestConfirmer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(time.Now, time.Second)
		calls := 0
		var answer func(int) ([]int64, error)
		c := &confirmer{g: g, pause: 100 * time.Millisecond, log: hclog.NewNullLogger(),
			inner: proposerFunc(func(_ context.Context, _ int32, set []int64) ([]int64, error) {
				calls++
				return answer(calls)
			})}
		if _, err := c.Propose(t.Context(), 1, []int64{1, 2}); !errors.Is(err, ErrLeaseExpired) || calls != 0 {
			t.Fatalf("propose without a lease: %v after %d calls", err, calls)
		}

		g.renewed(time.Now())
		answer = func(n int) ([]int64, error) {
			if n < 3 {
				return nil, fmt.Errorf("etcdstore: write group g: %w", context.DeadlineExceeded)
			}
			return []int64{1, 2}, nil
		}
		start := time.Now()
		got, err := c.Propose(t.Context(), 1, []int64{1, 2})
		if err != nil || !slices.Equal(got, []int64{1, 2}) || calls != 3 || time.Since(start) != 200*time.Millisecond {
			t.Fatalf("unknown outcomes then success: %v %v after %d calls, %v", got, err, calls, time.Since(start))
		}

		calls = 0
		answer = func(int) ([]int64, error) {
			return nil, fmt.Errorf("etcdstore: group g: %w", controller.ErrStaleMasterEpoch)
		}
		if _, err := c.Propose(t.Context(), 1, []int64{1, 2}); !errors.Is(err, controller.ErrStaleMasterEpoch) || calls != 1 {
			t.Fatalf("refusal: %v after %d calls", err, calls)
		}

		calls = 0
		answer = func(int) ([]int64, error) { return nil, errors.New("etcd unreachable") }
		if _, err := c.Propose(t.Context(), 1, []int64{1, 2}); !errors.Is(err, ErrLeaseExpired) || calls < 5 {
			t.Fatalf("etcd unreachable until the deadline: %v after %d calls", err, calls)
		}
	})
}
