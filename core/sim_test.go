package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// chaosConn splits every write into random pieces with random delays and
// resets the connection after a random number of bytes.
type chaosConn struct {
	net.Conn
	mu      sync.Mutex
	rng     *rand.Rand
	budget  int // bytes until a reset; < 0: never
	enabled *atomic.Bool
	resets  *atomic.Int64
}

var errChaosReset = errors.New("chaos: connection reset")

func (c *chaosConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for n < len(p) {
		k := 1 + c.rng.IntN(len(p)-n)
		on := c.enabled.Load()
		if on && c.budget >= 0 {
			if c.budget < k {
				c.resets.Add(1)
				c.Conn.Close()
				return n, errChaosReset
			}
			c.budget -= k
		}
		if on && c.rng.IntN(4) == 0 {
			time.Sleep(time.Duration(c.rng.IntN(3000)) * time.Microsecond)
		}
		w, err := c.Conn.Write(p[n : n+k])
		n += w
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// TestCoreSimFaults runs a SYNC_MASTER and a slave over connections that
// split, delay and reset, under random appends, for several seeds. It
// checks that PUT_OK implies the slave holds the record, that the slave log
// is always a prefix of the master's, and that it catches up once the
// faults stop.
func TestCoreSimFaults(t *testing.T) {
	var resets atomic.Int64
	defer func() {
		if resets.Load() == 0 {
			t.Error("no connection was reset: the fault injection does nothing")
		}
	}()
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 99))
				var rngMu sync.Mutex
				var enabled atomic.Bool
				enabled.Store(true)
				const seg = 8 << 10
				mst, sst := newMemStore(seg), newMemStore(seg)
				tr := newPipeTransport()
				tr.wrap = func(c net.Conn, dialer bool) net.Conn {
					rngMu.Lock()
					defer rngMu.Unlock()
					budget := -1
					if rng.IntN(2) == 0 {
						budget = rng.IntN(20 << 10)
					}
					return &chaosConn{Conn: c, rng: rand.New(rand.NewPCG(rng.Uint64(), 1)), budget: budget, enabled: &enabled, resets: &resets}
				}
				m := startMaster(t, mst, tr, MasterConfig{Role: SyncMaster, SlaveTimeout: 2 * time.Second, StartFromFirstSegment: true})
				defer m.Close()
				s := startSlave(t, sst, tr, SlaveConfig{ReconnectDelay: time.Second})
				defer s.Close()

				ctx := context.Background()
				var wg sync.WaitGroup
				for p := range 4 {
					wg.Go(func() {
						r := rand.New(rand.NewPCG(seed, uint64(p)))
						for range 60 {
							res, err := m.Put(ctx, testMsg(r.IntN(1500)))
							if err != nil {
								t.Error(err)
								return
							}
							if res.Status == PutOK && sst.Bounds().Max < res.NextOffset {
								t.Errorf("PUT_OK for [%d, %d) but the slave is at %d", res.Offset, res.NextOffset, sst.Bounds().Max)
							}
							time.Sleep(time.Duration(r.IntN(200)) * time.Millisecond)
						}
					})
				}
				wg.Wait()
				enabled.Store(false)
				want := mst.Bounds().Max
				for i := 0; sst.Bounds().Max < want; i++ {
					if i > 600 {
						t.Fatalf("slave stuck at %d of %d: %+v", sst.Bounds().Max, want, s.Status())
					}
					time.Sleep(100 * time.Millisecond)
				}
				t.Logf("slave reconnects: %d", s.Status().Reconnects)
				b := sst.Bounds()
				if !bytes.Equal(sst.bytesAt(b.Min, b.Max), mst.bytesAt(b.Min, b.Max)) {
					t.Fatal("slave log is not the master's")
				}
			})
		})
	}
}
