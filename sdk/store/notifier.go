package store

import (
	"sync"
	"sync/atomic"
)

// Notifier implements the Watch half of the Store contract: Watch
// registers a channel, Notify makes a non-blocking send on every
// registered channel (sends coalesce in the channel's buffer). A store
// embeds or holds one, returns Watch's result from its own Watch and calls
// Notify after every change of its max offset.
//
// The zero value is ready to use. Notify takes no lock and does not
// allocate (it reads a snapshot of the registered channels), so it may be
// called on an append's hot path and while the caller holds its own locks.
// Watch and the cancel functions it returns are safe for concurrent use; a
// cancel function may be called more than once. The same channel may be
// registered more than once: each registration has its own cancel.
type Notifier struct {
	mu       sync.Mutex // serializes changes of watchers
	watchers atomic.Pointer[[]*watcher]
}

// watcher is one registration; its address identifies it for cancel.
type watcher struct{ ch chan<- struct{} }

// Watch registers ch and returns the function that unregisters it.
func (n *Notifier) Watch(ch chan<- struct{}) (cancel func()) {
	w := &watcher{ch: ch}
	n.mu.Lock()
	old := n.snapshot()
	ws := append(old[:len(old):len(old)], w)
	n.watchers.Store(&ws)
	n.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { n.remove(w) }) }
}

// Notify wakes every registered channel that has room, without blocking.
func (n *Notifier) Notify() {
	for _, w := range n.snapshot() {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// Len reports how many registrations are active.
func (n *Notifier) Len() int { return len(n.snapshot()) }

func (n *Notifier) snapshot() []*watcher {
	if p := n.watchers.Load(); p != nil {
		return *p
	}
	return nil
}

func (n *Notifier) remove(w *watcher) {
	n.mu.Lock()
	defer n.mu.Unlock()
	cur := n.snapshot()
	next := make([]*watcher, 0, len(cur))
	for _, c := range cur {
		if c != w {
			next = append(next, c)
		}
	}
	n.watchers.Store(&next)
}
