package budget

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
)

func TestBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(10)
		ctx := context.Background()
		if err := b.Acquire(ctx, nil, 6); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() { got <- b.Acquire(ctx, nil, 6) }()
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("acquired beyond the budget: %v", err)
		default:
		}
		b.Release(6)
		synctest.Wait()
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if u := b.Used(); u != 6 {
			t.Fatalf("used %d, want 6", u)
		}
		b.Release(6)
		// An oversized cost is taken alone.
		if err := b.Acquire(ctx, nil, 100); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		go func() { got <- b.Acquire(ctx, stop, 1) }()
		synctest.Wait()
		close(stop)
		if err := <-got; !errors.Is(err, ErrStopped) {
			t.Fatalf("stop: %v, want ErrStopped", err)
		}
		cctx, cancel := context.WithCancel(ctx)
		go func() { got <- b.Acquire(cctx, nil, 1) }()
		synctest.Wait()
		cancel()
		if err := <-got; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancel: %v", err)
		}
	})
}
