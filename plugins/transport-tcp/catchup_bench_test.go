package tcptransport

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/plugins/commitlog"
	"github.com/replicatorhq/replicator/sdk/record"
)

// catchUpLog is the log the catch-up readers copy, over and over.
const catchUpLog = 32 << 20

// baselinePuts is the put rate without readers, from the readers=0 run of
// the same benchmark invocation: the others report their rate against it.
var baselinePuts atomic.Uint64

// BenchmarkPutWithCatchUpReaders measures ASYNC_MASTER put throughput (4
// producers, 1 KiB bodies, real commit log, builtin tcp transport on
// loopback) while N HA readers copy the master's 32 MiB log from offset 0
// as fast as they can, reconnecting from 0 each time they reach its end,
// so that they stay in catch-up for the whole run; then the same with
// Options.MaxTransferRate (--ha-max-transfer-rate) at 1 and 8 MiB/s per
// connection. readers=0 is the baseline of the same invocation: the
// others report put_ratio against it, and catchup_MB/s (what the readers
// copied). Run with -benchtime 2s; figures in docs/operators.md, Sizing.
func BenchmarkPutWithCatchUpReaders(b *testing.B) {
	for _, rate := range []int64{0, 1 << 20, 8 << 20} {
		for _, n := range []int{0, 10, 50} {
			name := fmt.Sprintf("readers=%d", n)
			if rate > 0 {
				if n == 0 {
					continue
				}
				name += fmt.Sprintf("/rate=%dMiB", rate>>20)
			}
			b.Run(name, func(b *testing.B) { benchCatchUp(b, n, rate) })
		}
	}
}

func benchCatchUp(b *testing.B, readers int, rate int64) {
	st, err := commitlog.Open(b.TempDir(), func() commitlog.Options {
		o := commitlog.DefaultOptions()
		o.SegmentSize = 64 << 20
		return o
	}())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	o := DefaultOptions()
	o.MaxTransferRate = rate
	tr := New(o)
	m, err := core.NewMaster(st, tr, core.MasterConfig{ListenAddr: "127.0.0.1:0", Role: core.AsyncMaster, StartFromFirstSegment: true})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Start(); err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	body := make([]byte, 4<<10)
	for st.Bounds().Max < catchUpLog {
		if _, err := m.Put(ctx, &record.Message{Topic: "Fill", Body: body}); err != nil {
			b.Fatal(err)
		}
	}
	target := st.Bounds().Max

	stop := make(chan struct{})
	var copied atomic.Int64
	var wg sync.WaitGroup
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := catchUpOnce(m.Addr(), target, stop, &copied)
				if err != nil {
					select {
					case <-stop:
						return
					default:
						b.Error(err)
						return
					}
				}
			}
		}()
	}
	// Let the readers get going before measuring.
	for readers > 0 && copied.Load() < int64(readers)<<18 {
		time.Sleep(time.Millisecond)
	}
	msg := make([]byte, 1<<10)
	b.SetBytes(int64(len(msg)))
	b.SetParallelism(1)
	start, copiedBefore := time.Now(), copied.Load()
	b.ResetTimer()
	var puts atomic.Int64
	var pwg sync.WaitGroup
	per := b.N / 4
	for p := range 4 {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			n := per
			if p == 0 {
				n += b.N % 4
			}
			for range n {
				if _, err := m.Put(ctx, &record.Message{Topic: "Bench", Body: msg}); err != nil {
					b.Error(err)
					return
				}
				puts.Add(1)
			}
		}()
	}
	pwg.Wait()
	b.StopTimer()
	elapsed := time.Since(start)
	rateNow := float64(puts.Load()) / elapsed.Seconds()
	b.ReportMetric(rateNow, "puts/s")
	b.ReportMetric(float64(copied.Load()-copiedBefore)/elapsed.Seconds()/1e6, "catchup_MB/s")
	if readers == 0 {
		baselinePuts.Store(uint64(rateNow))
	} else if base := baselinePuts.Load(); base > 0 {
		b.ReportMetric(rateNow/float64(base), "put_ratio")
	}
	close(stop)
	m.Close() // ends the readers' connections
	wg.Wait()
}

// catchUpOnce connects to the master's HA port, requests offset 0 and reads
// frames until target, acknowledging as a slave does, adding the body
// bytes it reads to copied as it goes.
func catchUpOnce(addr string, target int64, stop <-chan struct{}, copied *atomic.Int64) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	go func() {
		<-stop
		c.Close()
	}()
	var rep [8]byte
	if _, err := c.Write(rep[:]); err != nil {
		return err
	}
	r := bufio.NewReaderSize(c, 64<<10)
	var hdr [12]byte
	lastAck := time.Now()
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return err
		}
		off := int64(binary.BigEndian.Uint64(hdr[:8]))
		size := int64(binary.BigEndian.Uint32(hdr[8:]))
		if _, err := io.CopyN(io.Discard, r, size); err != nil {
			return err
		}
		copied.Add(size)
		if off+size >= target {
			return nil
		}
		if time.Since(lastAck) > time.Second {
			binary.BigEndian.PutUint64(rep[:], uint64(off+size))
			if _, err := c.Write(rep[:]); err != nil {
				return err
			}
			lastAck = time.Now()
		}
	}
}
