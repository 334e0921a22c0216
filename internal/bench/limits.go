package bench

import (
	"context"
	"fmt"
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
	// EchoCmd, when set, is the command (the executable, then leading
	// arguments) of the round trips' child processes: run with EchoArg and
	// further arguments appended, it must call EchoChild with those. The
	// 8-byte round trip is then also measured across two processes and
	// along three, for another RTTDuration each, alternating with the
	// in-process one. Empty: not measured.
	EchoCmd []string
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
	RTTP50, RTTP99  time.Duration // 8-byte request / 8-byte ack round trip, both ends in this process
	RoundTrips      float64       // round trips per second, one in flight
	DiskWriteMBps   float64       // 1 MiB writes, fdatasync every 4 MiB
	PageWriteMBps   float64       // 32 KiB pwrites into a fresh file, no sync
	FdatasyncPerSec float64       // 4 KiB write + fdatasync
	FdatasyncP50    time.Duration
	FdatasyncP99    time.Duration

	// XProcRTTP50 and XProcRTTP99 are the 8-byte round trip with the
	// echoing end in a child process (zero unless LimitsConfig.EchoCmd is
	// set): the least each process-to-process link of a put through the
	// daemons costs.
	XProcRTTP50, XProcRTTP99 time.Duration
	// ChainRTTP50 and ChainRTTP99 are 8 bytes along three processes, this
	// one -> a relay child -> an echo child -> the relay -> this one, each
	// hop a bare write and a blocking read (zero unless
	// LimitsConfig.EchoCmd is set): a sync put through the daemons with no
	// processing at all.
	ChainRTTP50, ChainRTTP99 time.Duration
}

// Measure measures the limits; the disk ones in dir.
func Measure(ctx context.Context, dir string, c LimitsConfig) (Limits, error) {
	c.defaults()
	var l Limits
	var err error
	if l.TCPMBps, err = benchload.RawLoopback(ctx, c.TCPBytes); err != nil {
		return l, err
	}
	if err := roundTrips(ctx, dir, c, &l); err != nil {
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
