package store_test

import (
	"sync"
	"testing"

	"github.com/replicatorhq/replicator/sdk/store"
)

func TestNotifier(t *testing.T) {
	var n store.Notifier
	n.Notify() // no watchers: nothing to do
	a, b := make(chan struct{}, 1), make(chan struct{}, 1)
	cancelA := n.Watch(a)
	cancelB1 := n.Watch(b)
	cancelB2 := n.Watch(b) // the same channel twice: two registrations
	n.Notify()
	n.Notify() // coalesces: never blocks on a full channel
	if len(a) != 1 || len(b) != 1 {
		t.Fatalf("after two notifies: %d and %d pending, want 1 and 1", len(a), len(b))
	}
	<-a
	<-b
	cancelB1()
	cancelB1() // idempotent: must not remove the second registration
	if got := n.Len(); got != 2 {
		t.Fatalf("Len after one cancel = %d, want 2", got)
	}
	n.Notify()
	if len(b) != 1 {
		t.Fatal("the second registration of b lost its wake-up")
	}
	<-a
	<-b
	cancelA()
	cancelB2()
	n.Notify()
	if len(a) != 0 || len(b) != 0 || n.Len() != 0 {
		t.Fatalf("cancelled watchers woken (%d, %d) or left (%d)", len(a), len(b), n.Len())
	}
}

func TestNotifierConcurrent(t *testing.T) {
	var n store.Notifier
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 200 {
				ch := make(chan struct{}, 1)
				n.Watch(ch)()
			}
		}()
		go func() {
			defer wg.Done()
			for range 200 {
				n.Notify()
			}
		}()
	}
	wg.Wait()
	if n.Len() != 0 {
		t.Fatalf("%d registrations left after every cancel", n.Len())
	}
}
