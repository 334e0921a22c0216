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

	"github.com/replicatorhq/replicator/controller"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/core/epoch"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/record"
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
	m := &Member{rep: rep, met: met, g: newGuard(clk.Now, 500*time.Millisecond), put: rep.Put}
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
	m.put = func(ctx context.Context, msg *record.Message) (core.PutResult, error) {
		res, err := rep.Put(ctx, msg)
		clk.Add(time.Second)
		return res, err
	}
	_, err = m.Put(context.Background(), msg)
	if !errors.Is(err, ErrLeaseExpired) || !errors.Is(err, core.ErrFenced) {
		t.Fatalf("put across the deadline answered %v", err)
	}
	if maxOff() == stored {
		t.Fatal("the put across the deadline should have reached the log (and not been acknowledged)")
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
