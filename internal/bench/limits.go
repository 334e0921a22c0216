package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/replicatorhq/replicator/internal/benchload"
)

// LimitsConfig sizes the limit measurements. Zero values take the defaults.
type LimitsConfig struct {
	TCPBytes      int64         // raw loopback stream (default 1 GiB)
	RTTDuration   time.Duration // 8-byte ping-pong (default 1s)
	DiskBytes     int64         // sequential write (default 512 MiB)
	FsyncDuration time.Duration // 4 KiB write + fdatasync loop (default 1s)
}

func (c *LimitsConfig) defaults() {
	if c.TCPBytes == 0 {
		c.TCPBytes = 1 << 30
	}
	if c.RTTDuration == 0 {
		c.RTTDuration = time.Second
	}
	if c.DiskBytes == 0 {
		c.DiskBytes = 512 << 20
	}
	if c.FsyncDuration == 0 {
		c.FsyncDuration = time.Second
	}
}

// Limits are the machine's limits, measured by Measure.
type Limits struct {
	TCPMBps         float64       // raw loopback TCP, 32 KiB frames, MB/s
	RTTP50, RTTP99  time.Duration // 8-byte request / 8-byte ack round trip
	RoundTrips      float64       // round trips per second, one in flight
	DiskWriteMBps   float64       // 1 MiB writes, fdatasync every 4 MiB
	PageWriteMBps   float64       // 32 KiB pwrites into a fresh file, no sync
	FdatasyncPerSec float64       // 4 KiB write + fdatasync
	FdatasyncP50    time.Duration
	FdatasyncP99    time.Duration
}

// Measure measures the limits; the disk ones in dir.
func Measure(ctx context.Context, dir string, c LimitsConfig) (Limits, error) {
	c.defaults()
	var l Limits
	var err error
	if l.TCPMBps, err = benchload.RawLoopback(ctx, c.TCPBytes); err != nil {
		return l, err
	}
	if err := pingPong(ctx, c.RTTDuration, &l); err != nil {
		return l, err
	}
	if l.DiskWriteMBps, err = seqWrite(ctx, dir, c.DiskBytes); err != nil {
		return l, err
	}
	if err := fsyncRate(ctx, dir, c.FsyncDuration, &l); err != nil {
		return l, err
	}
	if l.PageWriteMBps, err = benchload.RawPageWrite(ctx, dir, c.TCPBytes); err != nil {
		return l, err
	}
	return l, nil
}

// pingPong sends 8 bytes and waits for 8 back, one in flight, for d.
func pingPong(ctx context.Context, d time.Duration, l *Limits) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("bench: round trip: %w", err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var b [8]byte
		for {
			if _, err := io.ReadFull(c, b[:]); err != nil {
				return
			}
			if _, err := c.Write(b[:]); err != nil {
				return
			}
		}
	}()
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return fmt.Errorf("bench: round trip: %w", err)
	}
	defer c.Close()
	var b [8]byte
	var lat []time.Duration
	start := time.Now()
	for i := uint64(0); time.Since(start) < d && ctx.Err() == nil; i++ {
		binary.LittleEndian.PutUint64(b[:], i)
		t0 := time.Now()
		if _, err := c.Write(b[:]); err != nil {
			return fmt.Errorf("bench: round trip: %w", err)
		}
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return fmt.Errorf("bench: round trip: %w", err)
		}
		lat = append(lat, time.Since(t0))
	}
	el := time.Since(start)
	slices.Sort(lat)
	l.RTTP50, l.RTTP99 = benchload.Percentile(lat, 0.5), benchload.Percentile(lat, 0.99)
	l.RoundTrips = float64(len(lat)) / el.Seconds()
	return ctx.Err()
}

// seqWrite writes n bytes in 1 MiB writes with fdatasync every 4 MiB and a
// final one, into a new file in dir, and returns MB/s.
func seqWrite(ctx context.Context, dir string, n int64) (float64, error) {
	f, err := os.CreateTemp(dir, ".bench-seq-")
	if err != nil {
		return 0, fmt.Errorf("bench: disk limit: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	start := time.Now()
	var done int64
	for done < n && ctx.Err() == nil {
		w := min(int64(len(buf)), n-done)
		if _, err := f.Write(buf[:w]); err != nil {
			return 0, fmt.Errorf("bench: disk limit: %w", err)
		}
		done += w
		if done%(4<<20) == 0 || done == n {
			if err := fdatasync(f); err != nil {
				return 0, fmt.Errorf("bench: disk limit: fdatasync %s: %w", f.Name(), err)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return float64(done) / time.Since(start).Seconds() / 1e6, nil
}

// fsyncRate writes 4 KiB and fdatasyncs, in a loop, for d.
func fsyncRate(ctx context.Context, dir string, d time.Duration, l *Limits) error {
	f, err := os.Create(filepath.Join(dir, ".bench-fsync"))
	if err != nil {
		return fmt.Errorf("bench: fdatasync limit: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	var lat []time.Duration
	start := time.Now()
	for time.Since(start) < d && ctx.Err() == nil {
		if _, err := f.Write(buf); err != nil {
			return fmt.Errorf("bench: fdatasync limit: %w", err)
		}
		t0 := time.Now()
		if err := fdatasync(f); err != nil {
			return fmt.Errorf("bench: fdatasync limit: %w", err)
		}
		lat = append(lat, time.Since(t0))
	}
	el := time.Since(start)
	slices.Sort(lat)
	l.FdatasyncPerSec = float64(len(lat)) / el.Seconds()
	l.FdatasyncP50, l.FdatasyncP99 = benchload.Percentile(lat, 0.5), benchload.Percentile(lat, 0.99)
	return ctx.Err()
}
