package member

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// guard is a lease's local validity: a monotonic deadline, FenceAfter past
// the send time of the last renewal etcd answered. etcd renews a lease no
// earlier than the request was sent, so its expiry is at least TTL past
// that send time, and an election at least the controller's election
// delay later still: a deadline of FenceAfter < TTL ends first.
type guard struct {
	now   func() time.Time
	base  time.Time
	after time.Duration
	until atomic.Int64 // deadline in ns since base; 0: not valid
}

func newGuard(now func() time.Time, after time.Duration) *guard {
	return &guard{now: now, base: now(), after: after}
}

// renewed records a renewal whose request was sent at sent. The deadline
// never moves back.
func (g *guard) renewed(sent time.Time) {
	d := int64(sent.Sub(g.base) + g.after)
	for {
		cur := g.until.Load()
		if cur >= d || g.until.CompareAndSwap(cur, d) {
			return
		}
	}
}

// invalidate ends the validity until the next renewal of a new lease.
func (g *guard) invalidate() { g.until.Store(0) }

// remaining is the time left before the deadline (<= 0: not valid).
func (g *guard) remaining() time.Duration {
	u := g.until.Load()
	if u == 0 {
		return 0
	}
	return time.Duration(u - int64(g.now().Sub(g.base)))
}

// valid reports whether the lease is still valid by the local clock.
func (g *guard) valid() bool { return g.remaining() > 0 }

// errLeaseGone is what a renew function returns when etcd says the lease
// no longer exists.
var errLeaseGone = errors.New("member: lease not found")

// keeper renews one lease until its context ends, the lease is gone, or
// no renewal succeeded before the guard's deadline. In the last two cases
// it calls expired once (from the timer's goroutine for a missed
// deadline: at once, even while a renewal hangs).
type keeper struct {
	g        *guard
	renew    func(ctx context.Context) error
	interval time.Duration
	expired  func(reason error)
	failed   func(err error) // a failed renewal attempt (metrics, logs)

	mu    sync.Mutex
	timer *time.Timer
	fired bool
}

// arm (re)starts the deadline timer after a renewal.
func (k *keeper) arm() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fired {
		return
	}
	d := k.g.remaining()
	if k.timer == nil {
		k.timer = time.AfterFunc(d, k.check)
		return
	}
	k.timer.Reset(d)
}

// check runs at the deadline: a renewal may have moved it meanwhile.
func (k *keeper) check() {
	if k.g.valid() {
		k.arm()
		return
	}
	k.fire(fmt.Errorf("%w: no renewal within %v", ErrLeaseExpired, k.g.after))
}

// fire invalidates the guard and calls expired, once, under k.mu: after
// stop returns, a stopped keeper touches neither.
func (k *keeper) fire(reason error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fired {
		return
	}
	k.fired = true
	if k.timer != nil {
		k.timer.Stop()
	}
	k.g.invalidate()
	k.expired(reason)
}

// stop ends the timer; neither the guard nor expired is touched by k
// after stop returns.
func (k *keeper) stop() {
	k.mu.Lock()
	k.fired = true
	if k.timer != nil {
		k.timer.Stop()
	}
	k.mu.Unlock()
}

// run renews every interval; each attempt may take until the deadline.
func (k *keeper) run(ctx context.Context) {
	k.arm()
	t := time.NewTimer(k.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := k.g.now()
		left := k.g.remaining()
		if left <= 0 {
			return // the timer fires (or fired) expired
		}
		rctx, cancel := context.WithTimeout(ctx, left)
		err := k.renew(rctx)
		cancel()
		switch {
		case err == nil:
			k.g.renewed(sent)
			k.arm()
		case ctx.Err() != nil:
			return
		case errors.Is(err, errLeaseGone):
			k.fire(fmt.Errorf("%w: %w", ErrLeaseExpired, err))
			return
		default:
			k.failed(err)
		}
		t.Reset(k.interval)
	}
}
