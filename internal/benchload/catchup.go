package benchload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/config"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/transport"
)

// FillBody is the body size of the messages Fill appends.
const FillBody = 4000

// FrameSize is the write size of RawLoopback: the HA transfer batch (32 KiB).
const FrameSize = transport.DefaultBatchSize

// CatchUpEnv names the environment variable that sets the catch-up log
// size of the Go benchmarks ("256MiB", "1GiB", or bytes).
const CatchUpEnv = "REPLICATOR_BENCH_CATCHUP"

// DefaultCatchUpSize is the catch-up log size when CatchUpEnv is unset.
const DefaultCatchUpSize = 256 << 20

// ParseSize parses a positive byte count: digits with an optional unit
// (KiB, MiB, GiB, ..., as config.ParseSize).
func ParseSize(s string) (int64, error) {
	n, err := config.ParseSize(s)
	if err != nil {
		return 0, fmt.Errorf("benchload: %w", err)
	}
	if n <= 0 {
		return 0, fmt.Errorf("benchload: size %q is not positive", s)
	}
	return n, nil
}

// CatchUpSize is the catch-up log size of a Go benchmark: CatchUpEnv, or
// DefaultCatchUpSize when unset. A bad value fails tb.
func CatchUpSize(tb testing.TB) int64 {
	s := os.Getenv(CatchUpEnv)
	if s == "" {
		return DefaultCatchUpSize
	}
	n, err := ParseSize(s)
	if err != nil {
		tb.Fatalf("%s: %v", CatchUpEnv, err)
	}
	return n
}

// Fill appends messages with FillBody-byte bodies to st until its max
// offset is at least size, and returns the max offset.
func Fill(ctx context.Context, st store.Store, size int64) (int64, error) {
	msg := &record.Message{Topic: "TopicBench", Body: make([]byte, FillBody)}
	for st.Bounds().Max < size {
		if err := ctx.Err(); err != nil {
			return st.Bounds().Max, err
		}
		if _, err := st.Append(ctx, msg); err != nil {
			return st.Bounds().Max, fmt.Errorf("benchload: filling the master's log: %w", err)
		}
	}
	return st.Bounds().Max, nil
}

// WaitMax polls st every poll until its max offset is at least max; it
// returns ctx's error if ctx ends first. Polling (rather than Watch) keeps
// the waiting goroutine from waking on every append.
func WaitMax(ctx context.Context, st interface{ Bounds() store.Bounds }, max int64, poll time.Duration) error {
	t := time.NewTicker(poll)
	defer t.Stop()
	for st.Bounds().Max < max {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// CatchUpOnce starts a slave on st (a fresh, empty store) following the
// master at masterAddr through tr, waits until st holds total bytes, closes
// the slave and returns the time from the slave's start until then. The
// caller closes st.
func CatchUpOnce(ctx context.Context, masterAddr string, tr transport.Transport, st store.Store, total int64) (time.Duration, error) {
	s, err := core.NewSlave(st, tr, core.SlaveConfig{MasterAddr: masterAddr})
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := s.Start(); err != nil {
		return 0, err
	}
	err = WaitMax(ctx, st, total, 200*time.Microsecond)
	el := time.Since(start)
	if cerr := s.Close(); err == nil && cerr != nil && !errors.Is(cerr, core.ErrClosed) {
		err = cerr
	}
	return el, err
}

// RawLoopback streams n bytes (rounded up to whole frames) in FrameSize
// writes over one loopback TCP connection from a plain Go sender to a plain
// Go receiver, and returns the rate in MB/s (10^6 bytes per second).
func RawLoopback(ctx context.Context, n int64) (float64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("benchload: raw loopback: %w", err)
	}
	defer ln.Close()
	frames := (n + FrameSize - 1) / FrameSize
	total := frames * FrameSize
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		buf := make([]byte, FrameSize)
		for got := int64(0); got < total; got += FrameSize {
			if _, err := io.ReadFull(c, buf); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return 0, fmt.Errorf("benchload: raw loopback: %w", err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	buf := make([]byte, FrameSize)
	start := time.Now()
	for range frames {
		if _, err := c.Write(buf); err != nil {
			c.Close()
			<-done
			return 0, fmt.Errorf("benchload: raw loopback: %w", err)
		}
	}
	if err := <-done; err != nil {
		return 0, fmt.Errorf("benchload: raw loopback: %w", err)
	}
	return float64(total) / time.Since(start).Seconds() / 1e6, nil
}

// RawPageWrite writes n bytes (rounded up to whole frames) in FrameSize
// pwrites into a new, preallocated file in dir, without syncing, and
// returns the rate in MB/s: the least a replica does with the bytes it
// receives (fill fresh page-cache pages of its log), as the commitlog
// store does. On a VM whose free memory is handed back to the host (free
// page reporting), fresh pages cost far more than a copy, and this is the
// bound a catch-up meets before loopback TCP.
func RawPageWrite(ctx context.Context, dir string, n int64) (float64, error) {
	f, err := os.CreateTemp(dir, ".bench-pagewrite-")
	if err != nil {
		return 0, fmt.Errorf("benchload: page-cache write: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	frames := (n + FrameSize - 1) / FrameSize
	total := frames * FrameSize
	if err := preallocate(f, total); err != nil {
		return 0, fmt.Errorf("benchload: page-cache write: %w", err)
	}
	buf := make([]byte, FrameSize)
	for i := range buf {
		buf[i] = byte(i)
	}
	start := time.Now()
	for i := range frames {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if _, err := f.WriteAt(buf, i*FrameSize); err != nil {
			return 0, fmt.Errorf("benchload: page-cache write: %w", err)
		}
	}
	return float64(total) / time.Since(start).Seconds() / 1e6, nil
}
