// Package budget is a counting semaphore of bytes: the in-flight bound of
// the producer client (client) and of the API's producer streams
// (internal/api), one definition for both.
package budget

import (
	"context"
	"errors"
	"sync"
)

// ErrStopped is returned by Acquire when its stop channel closed first.
var ErrStopped = errors.New("budget: stopped")

// Budget bounds the bytes held at once. A cost larger than the whole
// budget is taken alone (when nothing else is held), so one oversized item
// never blocks forever.
type Budget struct {
	mu   sync.Mutex
	max  int64
	used int64
	wake chan struct{} // closed and replaced on every Release
}

// New returns a budget of max bytes.
func New(max int64) *Budget { return &Budget{max: max, wake: make(chan struct{})} }

// Acquire takes n bytes, waiting for releases while the budget is spent.
// It returns ctx's error if ctx ends first, ErrStopped if stop closes first.
func (b *Budget) Acquire(ctx context.Context, stop <-chan struct{}, n int64) error {
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return ErrStopped
		}
	}
}

// Release gives back n bytes taken by Acquire and wakes the waiters.
func (b *Budget) Release(n int64) {
	b.mu.Lock()
	b.used -= n
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}

// Used reports the bytes held now.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
