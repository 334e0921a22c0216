package core

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/replicatorhq/replicator/sdk/store"
)

func TestCoreGroupTransferReleasesExactlyCovered(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	g := newGroupTransfer(1)
	var ws []*syncWaiter
	for range 1000 {
		ws = append(ws, g.add(1+rng.Int64N(1_000_000)))
	}
	// Some give up (timeout) before any ack.
	for _, w := range ws[:100] {
		if !g.remove(w) {
			t.Fatal("remove of a waiting waiter failed")
		}
	}
	released := 0
	for _, q := range []int64{10, 500_000, 499_999, 1_000_000} { // the quorum may go down (a slave leaves)
		n := g.update([]int64{q - 5, q})
		released += n
		for _, w := range ws[100:] {
			select {
			case <-w.done:
				if w.next > max(q, 500_000) && q != 499_999 {
					t.Fatalf("waiter %d released at quorum %d", w.next, q)
				}
			default:
				if w.next <= q {
					t.Fatalf("waiter %d not released at quorum %d", w.next, q)
				}
			}
		}
	}
	if released != 900 || g.queue.Len() != 0 {
		t.Fatalf("released %d, %d left", released, g.queue.Len())
	}
	if g.remove(ws[500]) {
		t.Fatal("remove of a released waiter succeeded")
	}
	if w := g.add(1_000_000); w != nil {
		t.Fatal("a covered put waited")
	}
}

func TestCoreGroupTransferNthHighest(t *testing.T) {
	var buf []int64
	for _, tc := range []struct {
		acks []int64
		n    int
		want int64
	}{
		{nil, 1, -1},
		{[]int64{5}, 1, 5},
		{[]int64{5}, 2, -1},
		{[]int64{5, 9, 7}, 1, 9},
		{[]int64{5, 9, 7}, 2, 7},
		{[]int64{5, 9, 7}, 3, 5},
	} {
		if got := nthHighest(tc.acks, tc.n, &buf); got != tc.want {
			t.Errorf("nthHighest(%v, %d) = %d, want %d", tc.acks, tc.n, got, tc.want)
		}
	}
}

// syncFixture is a SYNC_MASTER over a memStore with raw slave peers.
type syncFixture struct {
	st  *memStore
	tr  *pipeTransport
	m   *Master
	reg *prometheus.Registry
}

func newSyncFixture(t *testing.T, cfg MasterConfig) *syncFixture {
	f := &syncFixture{st: newMemStore(1 << 20), tr: newPipeTransport(), reg: prometheus.NewPedanticRegistry()}
	f.st.fillRecords(t, 0, 1000)
	if cfg.MaxLag == 0 {
		cfg.Role = SyncMaster // a MaxLag fixture is an ASYNC_MASTER
	}
	cfg.Registerer = f.reg
	f.m = startMaster(t, f.st, f.tr, cfg)
	return f
}

// rawSlave connects a byte-level slave that reports at and drains frames.
func (f *syncFixture) rawSlave(t *testing.T, at int64) net.Conn {
	c := dial(t, f.tr)
	rawReport(t, c, at)
	go io.Copy(io.Discard, c)
	return c
}

type putOutcome struct {
	res PutResult
	err error
	at  time.Duration
}

func (f *syncFixture) putAsync(t *testing.T, ctx context.Context) <-chan putOutcome {
	ch := make(chan putOutcome, 1)
	start := time.Now()
	go func() {
		res, err := f.m.Put(ctx, sizedMsg(t, 100)) // 100-byte record
		ch <- putOutcome{res, err, time.Since(start)}
	}()
	return ch
}

func pending(ch <-chan putOutcome) bool {
	synctest.Wait()
	select {
	case o := <-ch:
		panic(o) // callers check pending before it may complete
	default:
		return true
	}
}

func TestCoreSyncPutOKWithSlave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mst := newMemStore(1 << 20)
		mst.fillRecords(t, 0, 1000)
		tr := newPipeTransport()
		reg := prometheus.NewPedanticRegistry()
		m := startMaster(t, mst, tr, MasterConfig{Role: SyncMaster, Registerer: reg})
		defer m.Close()
		sst := newMemStore(1 << 20)
		s := startSlave(t, sst, tr, SlaveConfig{Registerer: reg})
		defer s.Close()
		if err := m.WaitSlaves(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for i := range 50 {
			res, err := m.Put(context.Background(), testMsg(10+i))
			if err != nil || res.Status != PutOK {
				t.Fatalf("put %d: %v %v", i, res.Status, err)
			}
			if got := sst.Bounds().Max; got < res.NextOffset {
				t.Fatalf("PUT_OK before the slave held the record: slave max %d < %d", got, res.NextOffset)
			}
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("sync puts took %v of fake time: something polls", d)
		}
		if got := testutil.ToFloat64(m.met.puts.WithLabelValues("PUT_OK")); got != 50 {
			t.Fatalf("puts_total{PUT_OK} %v", got)
		}
		if n := testutil.CollectAndCount(reg, "replicator_ha_sync_wait_duration_seconds"); n != 1 {
			t.Fatalf("histogram missing: %d", n)
		}
		if ss := m.Status().Slaves; len(ss) != 1 || ss[0].AckOffset != mst.Bounds().Max || ss[0].LagBytes != 0 {
			t.Fatalf("status %+v", ss)
		}
	})
}

func TestCoreSyncPutFlushSlaveTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log, lb := newTestLogger(t)
		f := newSyncFixture(t, MasterConfig{Logger: log})
		defer f.m.Close()
		c := f.rawSlave(t, 1000) // acks 1000 now and never again
		defer c.Close()
		synctest.Wait()
		o := <-f.putAsync(t, context.Background())
		if o.err != nil || o.res.Status != FlushSlaveTimeout || o.at != DefaultSlaveTimeout {
			t.Fatalf("got %v %v after %v, want FLUSH_SLAVE_TIMEOUT after 5s", o.res.Status, o.err, o.at)
		}
		if f.st.Bounds().Max != o.res.NextOffset {
			t.Fatal("the message is not stored")
		}
		if lb.count("sync put timed out") != 1 {
			t.Fatal("timeout not logged")
		}
		if f.m.gt.queue.Len() != 0 {
			t.Fatal("timed-out waiter left in the queue")
		}
	})
}

func TestCoreSyncPutSlaveNotAvailable(t *testing.T) {
	t.Run("no slave", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newSyncFixture(t, MasterConfig{})
			defer f.m.Close()
			o := <-f.putAsync(t, context.Background())
			if o.err != nil || o.res.Status != SlaveNotAvailable || o.at != 0 {
				t.Fatalf("got %v %v after %v", o.res.Status, o.err, o.at)
			}
			if f.st.Bounds().Max != 1100 {
				t.Fatal("message not stored")
			}
			if got := testutil.ToFloat64(f.m.met.puts.WithLabelValues("SLAVE_NOT_AVAILABLE")); got != 1 {
				t.Fatalf("metric %v", got)
			}
		})
	})
	t.Run("slave too far behind", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newSyncFixture(t, MasterConfig{SlaveFallBehindMax: 500})
			defer f.m.Close()
			c := f.rawSlave(t, 600) // next offset 1100: 500 behind
			defer c.Close()
			synctest.Wait()
			o := <-f.putAsync(t, context.Background())
			if o.res.Status != SlaveNotAvailable || o.at != 0 {
				t.Fatalf("got %v after %v", o.res.Status, o.at)
			}
			rawReport(t, c, 1100) // 1200 - 1100 = 100 behind: available
			synctest.Wait()
			ch := f.putAsync(t, context.Background())
			pending(ch)
			rawReport(t, c, 1200)
			if o := <-ch; o.res.Status != PutOK || o.at != 0 {
				t.Fatalf("got %v after %v", o.res.Status, o.at)
			}
		})
	})
}

// TestCoreSyncPutAcksFromDistinctSlaves: SyncAcks=2 counts each slave's own
// ack, not the best ack twice.
func TestCoreSyncPutAcksFromDistinctSlaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newSyncFixture(t, MasterConfig{SyncAcks: 2})
		defer f.m.Close()
		a := f.rawSlave(t, 1000)
		defer a.Close()
		// One slave only: fewer than SyncAcks available.
		synctest.Wait()
		if o := <-f.putAsync(t, context.Background()); o.res.Status != SlaveNotAvailable {
			t.Fatalf("one slave for SyncAcks=2: %v", o.res.Status)
		}
		b := f.rawSlave(t, 1000)
		defer b.Close()
		synctest.Wait()
		ch := f.putAsync(t, context.Background()) // record [1100, 1200)
		pending(ch)
		rawReport(t, a, 1200)
		rawReport(t, a, 1200) // the same slave twice is still one slave
		pending(ch)
		rawReport(t, b, 1199)
		pending(ch)
		time.Sleep(2 * time.Second)
		rawReport(t, b, 1200)
		if o := <-ch; o.res.Status != PutOK || o.at != 2*time.Second {
			t.Fatalf("got %v after %v, want PUT_OK at the second slave's ack (2s)", o.res.Status, o.at)
		}
		// Only one slave keeps acking: timeout.
		ch = f.putAsync(t, context.Background()) // [1200, 1300)
		pending(ch)
		rawReport(t, a, 1300)
		if o := <-ch; o.res.Status != FlushSlaveTimeout || o.at != DefaultSlaveTimeout {
			t.Fatalf("got %v after %v", o.res.Status, o.at)
		}
	})
}

func TestCoreSyncPutReleasedInAnyOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newSyncFixture(t, MasterConfig{})
		defer f.m.Close()
		c := f.rawSlave(t, 1000)
		defer c.Close()
		synctest.Wait()
		var chs []<-chan putOutcome
		for range 10 {
			chs = append(chs, f.putAsync(t, context.Background()))
			synctest.Wait()
		}
		// Ack the first five records only.
		rawReport(t, c, 1500)
		synctest.Wait()
		done := 0
		for _, ch := range chs {
			select {
			case o := <-ch:
				if o.res.NextOffset > 1500 || o.res.Status != PutOK {
					t.Fatalf("released %+v at ack 1500", o.res)
				}
				done++
			default:
			}
		}
		if done != 5 || f.m.gt.queue.Len() != 5 {
			t.Fatalf("%d released, %d waiting", done, f.m.gt.queue.Len())
		}
		rawReport(t, c, 2000)
		synctest.Wait()
		if f.m.gt.queue.Len() != 0 {
			t.Fatal("waiters left")
		}
	})
}

func TestCoreSyncPutFlushDiskTimeout(t *testing.T) {
	for _, tc := range []struct {
		name  string
		role  Role
		slave bool
		want  PutStatus
	}{
		{"async master", AsyncMaster, false, FlushDiskTimeout},
		{"sync master, slave acks", SyncMaster, true, FlushDiskTimeout},
		{"sync master, no slave: replica status wins", SyncMaster, false, SlaveNotAvailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newMemStore(1 << 20)
				st.flushErr = store.ErrFlushDiskTimeout
				tr := newPipeTransport()
				m := startMaster(t, st, tr, MasterConfig{Role: tc.role})
				defer m.Close()
				if tc.slave {
					c := dial(t, tr)
					defer c.Close()
					rawReport(t, c, 0)
					go func() {
						for {
							off, body := rawFrameOrEOF(c)
							if off < 0 {
								return
							}
							rawReport(t, c, off+int64(len(body)))
						}
					}()
					synctest.Wait()
				}
				res, err := m.Put(context.Background(), testMsg(10))
				if err != nil || res.Status != tc.want {
					t.Fatalf("got %v %v, want %v", res.Status, err, tc.want)
				}
			})
		})
	}
}

// rawFrameOrEOF reads one frame, or returns offset -1 at any error.
func rawFrameOrEOF(c net.Conn) (int64, []byte) {
	var h [12]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return -1, nil
	}
	off := int64(uint64(h[0])<<56 | uint64(h[1])<<48 | uint64(h[2])<<40 | uint64(h[3])<<32 | uint64(h[4])<<24 | uint64(h[5])<<16 | uint64(h[6])<<8 | uint64(h[7]))
	size := int(uint32(h[8])<<24 | uint32(h[9])<<16 | uint32(h[10])<<8 | uint32(h[11]))
	body := make([]byte, size)
	if _, err := io.ReadFull(c, body); err != nil {
		return -1, nil
	}
	return off, body
}

func TestCoreSyncPutCancelAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newSyncFixture(t, MasterConfig{})
		c := f.rawSlave(t, 1000)
		defer c.Close()
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		ch := f.putAsync(t, ctx)
		pending(ch)
		time.Sleep(time.Second)
		cancel()
		if o := <-ch; !errors.Is(o.err, context.Canceled) || o.res.Status != FlushSlaveTimeout || o.at != time.Second {
			t.Fatalf("canceled put: %v %v after %v", o.res.Status, o.err, o.at)
		}
		ch = f.putAsync(t, context.Background())
		pending(ch)
		f.m.Close()
		if o := <-ch; o.err != nil || o.res.Status != FlushSlaveTimeout || o.at != 0 {
			t.Fatalf("put during Close: %v %v after %v", o.res.Status, o.err, o.at)
		}
	})
}

func TestCoreAsyncMasterPutDoesNotWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1 << 20)
		tr := newPipeTransport()
		m := startMaster(t, st, tr, MasterConfig{})
		defer m.Close()
		c := dial(t, tr)
		defer c.Close()
		rawReport(t, c, 0) // a slave that never acks
		go io.Copy(io.Discard, c)
		msg := testMsg(10)
		res, err := m.Put(context.Background(), msg)
		if err != nil || res.Status != PutOK || res.Offset != 0 || res.NextOffset != recordSize(t, msg) {
			t.Fatalf("%+v %v", res, err)
		}
	})
}

// TestCoreAsyncMaxLag: with MaxLag, an ASYNC_MASTER put never waits without
// an available slave, waits while the slave is more than MaxLag behind it,
// is released by the very ack that brings the slave within MaxLag (no
// polling), and answers PUT_OK after SlaveTimeout if no ack does.
func TestCoreAsyncMaxLag(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newSyncFixture(t, MasterConfig{MaxLag: 150}) // records of 100 bytes
		defer f.m.Close()
		want := func(o putOutcome, next int64, after time.Duration) {
			t.Helper()
			if o.err != nil || o.res.Status != PutOK || o.res.NextOffset != next || o.at != after {
				t.Fatalf("got %v %v next %d after %v, want PUT_OK next %d after %v", o.res.Status, o.err, o.res.NextOffset, o.at, next, after)
			}
		}
		want(<-f.putAsync(t, context.Background()), 1100, 0) // no slave: no wait

		c := f.rawSlave(t, 1000)
		defer c.Close()
		synctest.Wait()
		ch := f.putAsync(t, context.Background()) // next 1200: needs an ack of 1050
		pending(ch)
		rawReport(t, c, 1040)
		pending(ch)
		rawReport(t, c, 1050)
		want(<-ch, 1200, 0)

		want(<-f.putAsync(t, context.Background()), 1300, DefaultSlaveTimeout) // no ack comes
		if f.st.Bounds().Max != 1300 || f.m.gt.queue.Len() != 0 {
			t.Fatalf("max %d, %d waiters left", f.st.Bounds().Max, f.m.gt.queue.Len())
		}
		rawReport(t, c, 1300)
		synctest.Wait()
		want(<-f.putAsync(t, context.Background()), 1400, 0) // within MaxLag
		if got := testutil.ToFloat64(f.m.met.puts.WithLabelValues("PUT_OK")); got != 4 {
			t.Fatalf("puts_total{PUT_OK} %v", got)
		}
		if n := testutil.CollectAndCount(f.reg, "replicator_ha_lag_wait_duration_seconds"); n != 1 {
			t.Fatalf("lag wait histogram missing: %d", n)
		}

		ctx, cancel := context.WithCancel(context.Background())
		rawReport(t, c, 1400)
		synctest.Wait()
		f.putAsync(t, context.Background()) // next 1500: within MaxLag of 1400
		synctest.Wait()
		ch = f.putAsync(t, ctx) // next 1600: needs 1450
		pending(ch)
		cancel()
		if o := <-ch; !errors.Is(o.err, context.Canceled) || o.res.Status != PutOK || o.at != 0 {
			t.Fatalf("cancelled wait: %v %v after %v", o.res.Status, o.err, o.at)
		}
	})
}

func TestCoreMasterConfigMaxLag(t *testing.T) {
	if err := (MasterConfig{ListenAddr: "x:1", MaxLag: -1}).Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("negative MaxLag: %v", err)
	}
}
