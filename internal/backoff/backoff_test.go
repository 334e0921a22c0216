package backoff_test

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/internal/backoff"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNext(t *testing.T) {
	var b backoff.Backoff
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i, w := range want {
		if got := b.Next(); got != w*time.Millisecond {
			t.Fatalf("failure %d: %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
	b.Reset()
	if got := b.Next(); got != backoff.Min {
		t.Fatalf("after Reset: %v, want %v", got, backoff.Min)
	}
}

func TestStopped(t *testing.T) {
	open, closed := make(chan struct{}), make(chan struct{})
	close(closed)
	transient := errors.New("accept: too many open files")
	for _, tc := range []struct {
		err  error
		done chan struct{}
		want bool
	}{
		{transient, open, false},
		{transient, closed, true},
		{net.ErrClosed, open, true},
		{fmt.Errorf("accept tcp: %w", net.ErrClosed), open, true},
	} {
		if got := backoff.Stopped(tc.err, tc.done); got != tc.want {
			t.Fatalf("Stopped(%v, done closed %v) = %v, want %v", tc.err, tc.done == closed, got, tc.want)
		}
	}
}

func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		done := make(chan struct{})
		start := time.Now()
		if !backoff.Sleep(20*time.Millisecond, done) {
			t.Fatal("Sleep returned false with done open")
		}
		if el := time.Since(start); el != 20*time.Millisecond {
			t.Fatalf("slept %v, want 20ms", el)
		}
		go func() {
			time.Sleep(time.Millisecond)
			close(done)
		}()
		start = time.Now()
		if backoff.Sleep(time.Hour, done) {
			t.Fatal("Sleep returned true although done closed")
		}
		if el := time.Since(start); el != time.Millisecond {
			t.Fatalf("Sleep ended after %v, want 1ms (when done closed)", el)
		}
	})
}
