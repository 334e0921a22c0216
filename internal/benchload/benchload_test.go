package benchload

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/pluginhost"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestDrivePuts(t *testing.T) {
	var n atomic.Int64
	st := Drive(context.Background(), Load{Producers: 4, Puts: 1000}, func(ctx context.Context, p int) (int64, bool, error) {
		v := n.Add(1)
		return v, v%10 != 0, nil
	})
	if st.FirstErr != nil || st.Puts != 1000 || st.NotOK != 100 || st.Errors != 0 || len(st.Latency) != 1000 {
		t.Fatalf("%+v", st)
	}
	for i := 1; i < len(st.Latency); i++ {
		if st.Latency[i] < st.Latency[i-1] {
			t.Fatal("latencies not sorted")
		}
	}
	if st.MsgsPerSec() <= 0 || st.Percentile(0.5) > st.Percentile(0.99) {
		t.Fatalf("msgs/s %v p50 %v p99 %v", st.MsgsPerSec(), st.Percentile(0.5), st.Percentile(0.99))
	}
}

// TestDriveError: the first error stops every producer and is reported.
func TestDriveError(t *testing.T) {
	boom := errors.New("boom")
	var n atomic.Int64
	var seen []int64
	st := Drive(context.Background(), Load{Producers: 1, Duration: time.Hour, OnPut: func(p int, next int64, _ time.Time) {
		seen = append(seen, next)
	}}, func(ctx context.Context, p int) (int64, bool, error) {
		if n.Add(1) == 5 {
			return 0, false, boom
		}
		return n.Load() * 10, true, nil
	})
	if !errors.Is(st.FirstErr, boom) || st.Errors != 1 || st.Puts != 4 || len(seen) != 4 || seen[3] != 40 {
		t.Fatalf("%+v seen %v", st, seen)
	}
}

func TestDriveBadLoad(t *testing.T) {
	for _, l := range []Load{{}, {Producers: 1}, {Puts: 1}} {
		if st := Drive(context.Background(), l, nil); !errors.Is(st.FirstErr, ErrBadLoad) {
			t.Errorf("%+v: %v", l, st.FirstErr)
		}
	}
	if Percentile(nil, 0.5) != 0 {
		t.Error("percentile of nothing")
	}
}

func TestParseSize(t *testing.T) {
	for s, want := range map[string]int64{"4096": 4096, "256MiB": 256 << 20, "1GiB": 1 << 30} {
		if got, err := ParseSize(s); err != nil || got != want {
			t.Errorf("%q: %d, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "0", "-1", "1 gigabyte"} {
		if _, err := ParseSize(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
	t.Setenv(CatchUpEnv, "")
	if CatchUpSize(t) != DefaultCatchUpSize {
		t.Error("default catch-up size")
	}
	t.Setenv(CatchUpEnv, "8MiB")
	if CatchUpSize(t) != 8<<20 {
		t.Error("catch-up size from the environment")
	}
}

func TestRawLoopback(t *testing.T) {
	mbs, err := RawLoopback(context.Background(), 4<<20)
	if err != nil || mbs <= 0 {
		t.Fatalf("%v MB/s, %v", mbs, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := RawLoopback(ctx, 1<<30); err == nil {
		t.Fatal("canceled stream succeeded")
	}
}

// TestCatchUpOnce fills a master's log and times a fresh slave catching up.
func TestCatchUpOnce(t *testing.T) {
	dir := t.TempDir()
	open, err := pluginhost.Builtin().Store("commitlog")
	if err != nil {
		t.Fatal(err)
	}
	mst, err := open(filepath.Join(dir, "m"), pluginhost.StoreOptions{SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer mst.Close()
	total, err := Fill(context.Background(), mst, 3<<20)
	if err != nil || total < 3<<20 {
		t.Fatalf("Fill: %d, %v", total, err)
	}
	tr := tcptransport.New(tcptransport.DefaultOptions())
	m, err := core.NewMaster(mst, tr, core.MasterConfig{ListenAddr: "127.0.0.1:0", StartFromFirstSegment: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sst, err := open(filepath.Join(dir, "s"), pluginhost.StoreOptions{SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer sst.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	el, err := CatchUpOnce(ctx, m.Addr(), tr, sst, total)
	if err != nil || el <= 0 || sst.Bounds().Max != total {
		t.Fatalf("CatchUpOnce: %v, %v; slave holds %d of %d", el, err, sst.Bounds().Max, total)
	}
}
