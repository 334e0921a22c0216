package core

import (
	"context"
	"errors"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

type batchOutcome struct {
	out []BatchPut
	at  time.Duration
}

// putBatchAsync puts n 100-byte records as one batch: over the fixture's
// 1000 bytes they end at 1100, 1200, ...
func (f *syncFixture) putBatchAsync(t *testing.T, ctx context.Context, msgs ...*record.Message) <-chan batchOutcome {
	ch := make(chan batchOutcome, 1)
	start := time.Now()
	go func() {
		out := f.m.PutBatch(ctx, msgs)
		ch <- batchOutcome{out, time.Since(start)}
	}()
	return ch
}

// newBatchFixture is a SYNC_MASTER fixture with one raw slave that
// reported 1000, closed at the end of the test.
func newBatchFixture(t *testing.T) (*syncFixture, net.Conn) {
	f := newSyncFixture(t, MasterConfig{})
	c := f.rawSlave(t, 1000)
	t.Cleanup(func() {
		c.Close()
		f.m.Close()
	})
	synctest.Wait()
	return f, c
}

func hundreds(t *testing.T, n int) []*record.Message {
	msgs := make([]*record.Message, n)
	for i := range msgs {
		msgs[i] = sizedMsg(t, 100)
	}
	return msgs
}

// wantBatch checks each message's status and error (nil, or errors.Is).
func wantBatch(t *testing.T, out []BatchPut, status []PutStatus, errs []error) {
	t.Helper()
	if len(out) != len(status) {
		t.Fatalf("%d results, want %d", len(out), len(status))
	}
	for i, o := range out {
		want := errs[i]
		switch {
		case want == nil && o.Err != nil, want != nil && !errors.Is(o.Err, want):
			t.Errorf("message %d: error %v, want %v", i, o.Err, want)
		}
		if o.Status != status[i] {
			t.Errorf("message %d: status %v, want %v", i, o.Status, status[i])
		}
		if stored := o.NextOffset > 0; stored && o.NextOffset != 1100+100*int64(i) {
			t.Errorf("message %d: next offset %d, want %d", i, o.NextOffset, 1100+100*i)
		}
	}
}

// TestCorePutBatchPartialAcks: one wait for the batch, but each record is
// PUT_OK as soon as some quorum covered it, even when a later one times
// out and even when the quorum that covered it is gone by then.
func TestCorePutBatchPartialAcks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, c := newBatchFixture(t)
		ch := f.putBatchAsync(t, context.Background(), hundreds(t, 3)...) // ends 1100, 1200, 1300
		synctest.Wait()
		if f.m.gt.queue.Len() != 1 {
			t.Fatalf("%d waiters for one batch, want 1", f.m.gt.queue.Len())
		}
		rawReport(t, c, 1200)
		synctest.Wait()
		select {
		case o := <-ch:
			t.Fatalf("answered before the last record's ack: %+v", o.out)
		default:
		}
		c.Close() // the quorum falls to none: the records it covered stay covered
		o := <-ch
		if o.at != DefaultSlaveTimeout {
			t.Fatalf("answered after %v, want the slave timeout", o.at)
		}
		wantBatch(t, o.out, []PutStatus{PutOK, PutOK, FlushSlaveTimeout}, []error{nil, nil, nil})
		if f.m.gt.queue.Len() != 0 {
			t.Fatal("waiter left in the queue")
		}
		for st, n := range map[string]float64{"PUT_OK": 2, "FLUSH_SLAVE_TIMEOUT": 1} {
			if got := testutil.ToFloat64(f.m.met.puts.WithLabelValues(st)); got != n {
				t.Errorf("puts_total{%s} = %v, want %v", st, got, n)
			}
		}
	})
}

// TestCorePutBatchAllAcked: the ack covering the last record answers the
// batch at once.
func TestCorePutBatchAllAcked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, c := newBatchFixture(t)
		ch := f.putBatchAsync(t, context.Background(), hundreds(t, 4)...)
		synctest.Wait()
		rawReport(t, c, 1100)
		rawReport(t, c, 1300)
		time.Sleep(time.Second)
		rawReport(t, c, 1400)
		o := <-ch
		if o.at != time.Second {
			t.Fatalf("answered after %v, want at the last ack (1s)", o.at)
		}
		wantBatch(t, o.out, []PutStatus{PutOK, PutOK, PutOK, PutOK}, make([]error, 4))
	})
}

// TestCorePutBatchSlaveNotAvailable: the records past SlaveFallBehindMax of
// the slave are SLAVE_NOT_AVAILABLE, the others wait as usual; with no
// slave every one is, at once.
func TestCorePutBatchSlaveNotAvailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newSyncFixture(t, MasterConfig{SlaveFallBehindMax: 250})
		defer f.m.Close()
		o := <-f.putBatchAsync(t, context.Background(), hundreds(t, 2)...)
		if o.at != 0 {
			t.Fatalf("answered after %v without a slave", o.at)
		}
		wantBatch(t, o.out, []PutStatus{SlaveNotAvailable, SlaveNotAvailable}, make([]error, 2))
		c := f.rawSlave(t, 1200) // the store ends at 1200: available below 1450
		defer c.Close()
		synctest.Wait()
		ch := f.putBatchAsync(t, context.Background(), hundreds(t, 3)...) // ends 1300, 1400, 1500
		synctest.Wait()
		rawReport(t, c, 1400)
		o = <-ch
		if o.at != 0 {
			t.Fatalf("answered after %v, want at the ack", o.at)
		}
		for i, want := range []PutStatus{PutOK, PutOK, SlaveNotAvailable} {
			if o.out[i].Status != want || o.out[i].Err != nil || o.out[i].NextOffset != 1300+100*int64(i) {
				t.Errorf("message %d: %+v, want %v", i, o.out[i], want)
			}
		}
	})
}

// TestCorePutBatchEndedWhileWaiting: ctx, a fence or Close end the wait;
// the records covered by then are PUT_OK, the others FLUSH_SLAVE_TIMEOUT
// with ctx's error, the fence's, or none.
func TestCorePutBatchEndedWhileWaiting(t *testing.T) {
	fenceReason := errors.New("lease lost")
	for _, tc := range []struct {
		name string
		end  func(f *syncFixture, cancel context.CancelFunc)
		err  error
	}{
		{"ctx canceled", func(_ *syncFixture, cancel context.CancelFunc) { cancel() }, context.Canceled},
		{"fenced", func(f *syncFixture, _ context.CancelFunc) { f.m.Fence(fenceReason) }, ErrFenced},
		{"closed", func(f *syncFixture, _ context.CancelFunc) { f.m.Close() }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f, c := newBatchFixture(t)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				ch := f.putBatchAsync(t, ctx, hundreds(t, 3)...)
				synctest.Wait()
				rawReport(t, c, 1100)
				synctest.Wait()
				time.Sleep(time.Second)
				tc.end(f, cancel)
				o := <-ch
				if o.at != time.Second {
					t.Fatalf("answered after %v, want at once (1s)", o.at)
				}
				wantBatch(t, o.out, []PutStatus{PutOK, FlushSlaveTimeout, FlushSlaveTimeout}, []error{nil, tc.err, tc.err})
				if tc.name == "fenced" && !errors.Is(o.out[1].Err, fenceReason) {
					t.Errorf("fence error %v does not wrap the reason", o.out[1].Err)
				}
			})
		})
	}
}

// TestCorePutBatchRefused: after a fence or Close no message of a batch is
// stored, each refused with Put's error.
func TestCorePutBatchRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newSyncFixture(t, MasterConfig{})
		f.m.Fence(nil)
		o := <-f.putBatchAsync(t, context.Background(), hundreds(t, 2)...)
		for i, r := range o.out {
			if !errors.Is(r.Err, ErrFenced) || r.PutResult != (PutResult{}) {
				t.Errorf("fenced, message %d: %+v", i, r)
			}
		}
		f.m.Close()
		o = <-f.putBatchAsync(t, context.Background(), hundreds(t, 2)...)
		for i, r := range o.out {
			if !errors.Is(r.Err, ErrFenced) && !errors.Is(r.Err, ErrClosed) {
				t.Errorf("closed, message %d: %+v", i, r)
			}
		}
		if f.st.Bounds().Max != 1000 {
			t.Fatalf("stored up to %d, want nothing stored", f.st.Bounds().Max)
		}
		g := newSyncFixture(t, MasterConfig{})
		g.m.Close()
		for i, r := range g.m.PutBatch(context.Background(), hundreds(t, 2)) {
			if !errors.Is(r.Err, ErrClosed) || r.PutResult != (PutResult{}) {
				t.Errorf("closed, message %d: %+v", i, r)
			}
		}
	})
}

// TestCorePutBatchAppendError: an append failing mid-batch answers that
// message with its error and the rest, not stored, with ErrBatchAborted;
// the earlier ones are stored and answered as usual.
func TestCorePutBatchAppendError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, c := newBatchFixture(t)
		msgs := []*record.Message{sizedMsg(t, 100), testMsg(2 << 20), sizedMsg(t, 100)} // the second is larger than a segment
		ch := f.putBatchAsync(t, context.Background(), msgs...)
		synctest.Wait()
		rawReport(t, c, 1100)
		o := <-ch
		wantBatch(t, o.out, []PutStatus{PutOK, PutOK, PutOK}, []error{nil, store.ErrMessageTooLarge, ErrBatchAborted})
		if o.out[1].NextOffset != 0 || o.out[2].NextOffset != 0 || errors.Is(o.out[1].Err, ErrBatchAborted) {
			t.Errorf("failed messages: %+v %+v", o.out[1], o.out[2])
		}
		if !errors.Is(o.out[2].Err, store.ErrMessageTooLarge) {
			t.Errorf("aborted message's error %v does not say why", o.out[2].Err)
		}
		if f.st.Bounds().Max != 1100 {
			t.Fatalf("stored up to %d, want 1100", f.st.Bounds().Max)
		}
		if got := testutil.ToFloat64(f.m.met.puts.WithLabelValues("PUT_OK")); got != 1 {
			t.Errorf("puts_total{PUT_OK} = %v, want 1", got)
		}
	})
}

// TestCoreGroupTransferBatchWaiter: a batch waiter sits in the heap under
// its first uncovered record and is released when its last is covered.
func TestCoreGroupTransferBatchWaiter(t *testing.T) {
	g := newGroupTransfer(1)
	b := g.addBatch([]int64{10, 20, 30})
	s := g.add(15)
	if g.release(12) != 0 || b.covered != 1 || b.next != 20 || g.queue[0] != s {
		t.Fatalf("after 12: covered %d next %d", b.covered, b.next)
	}
	if g.release(25) != 1 || b.covered != 2 || !closed(s.done) || closed(b.done) {
		t.Fatalf("after 25: covered %d", b.covered)
	}
	if !g.remove(b) || b.covered != 2 || g.queue.Len() != 0 {
		t.Fatal("remove")
	}
	if w := g.addBatch([]int64{21, 25}); w != nil {
		t.Fatal("a batch the quorum covers waits")
	}
	w := g.addBatch([]int64{24, 26, 40})
	if w.covered != 1 || w.next != 26 {
		t.Fatalf("added at quorum 25: covered %d next %d", w.covered, w.next)
	}
	if g.release(100) != 1 || w.covered != 3 || !closed(w.done) || g.remove(w) {
		t.Fatal("release(100)")
	}
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
