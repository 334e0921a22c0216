package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The round trips' children (echo_test.go).
	if len(os.Args) > 2 && os.Args[1] == EchoArg {
		if err := EchoChild(context.Background(), os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if len(os.Args) > 2 && os.Args[1] == echoExitArg {
		os.Exit(3) // a child that exits without connecting
	}
	if len(os.Args) > 3 && os.Args[1] == echoNoChainArg {
		if os.Args[3] != relayArg {
			os.Exit(3) // an echo child that fails, its relay works
		}
		if err := EchoChild(context.Background(), os.Args[3:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if len(os.Args) > 2 && os.Args[1] == echoHangArg {
		time.Sleep(time.Hour) // a child that never connects; SIGTERM ends it
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// tiny is a configuration that runs in about a second.
func tiny(t *testing.T) Config {
	return Config{
		Via:         []string{ViaLibrary},
		Size:        4 << 20,
		Producers:   []int{1, 4},
		MsgSize:     512,
		Duration:    150 * time.Millisecond,
		Warmup:      -1,
		SegmentSize: 1 << 20,
		Dir:         t.TempDir(),
		QuietMax:    -1,
		Limits:      LimitsConfig{TCPBytes: 8 << 20, RTTDuration: 50 * time.Millisecond, DiskBytes: 8 << 20, FsyncDuration: 50 * time.Millisecond},
	}
}

// requiredKeys are the keys issue 7 asks every JSON line to carry.
var requiredKeys = []string{"scenario", "store", "mb_per_s", "msgs_per_s", "p50_ms", "p99_ms", "p999_ms",
	"lag_p99_ms", "limit_mb_per_s", "ratio_to_limit"}

// TestRunLibrary runs every scenario in process and checks each result's
// JSON keys and that its figures make sense.
func TestRunLibrary(t *testing.T) {
	cfg := tiny(t)
	var got []Result
	cfg.Emit = func(r Result) { got = append(got, r) }
	var progress bytes.Buffer
	cfg.Progress = &progress
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	// catchup, then sync and async at 1 and 4 producers.
	if len(got) != 5 {
		t.Fatalf("%d results, want 5", len(got))
	}
	for _, r := range got {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range requiredKeys {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: no key %q in %s", r.Scenario, k, b)
			}
		}
		if r.Store != StoreBuiltin || r.Via != ViaLibrary || r.Runs != 1 {
			t.Errorf("%s: store %q via %q runs %d", r.Scenario, r.Store, r.Via, r.Runs)
		}
		if *r.MBPerS <= 0 || *r.LimitMBPerS <= 0 || *r.RatioToLimit <= 0 || *r.RatioToLimit != *r.MBPerS / *r.LimitMBPerS {
			t.Errorf("%s: mb/s %v limit %v ratio %v", r.Scenario, *r.MBPerS, *r.LimitMBPerS, *r.RatioToLimit)
		}
		if r.PageWriteMBPerS == nil || *r.PageWriteMBPerS <= 0 || *r.RatioToPageWrite != *r.MBPerS / *r.PageWriteMBPerS {
			t.Errorf("%s: page-cache fill limit %v ratio %v", r.Scenario, r.PageWriteMBPerS, r.RatioToPageWrite)
		}
		if r.ProcessPeakRSS == nil || *r.ProcessPeakRSS <= 0 {
			t.Errorf("%s: no process RSS", r.Scenario)
		}
		switch r.Scenario {
		case Catchup:
			if m["msgs_per_s"] != nil || m["p50_ms"] != nil || m["lag_p99_ms"] != nil || m["producers"] != nil || m["process_cpu_us_per_msg"] != nil {
				t.Errorf("catchup: keys that do not apply are not null: %s", b)
			}
			if r.Bytes < 4<<20 || *r.SizeBytes != r.Bytes {
				t.Errorf("catchup: %d bytes of %d", r.Bytes, *r.SizeBytes)
			}
		case Sync, Async:
			if r.Messages <= 0 || *r.MsgsPerS <= 0 || r.Bytes != r.Messages*512 {
				t.Errorf("%s: %d messages, %d bytes, %v msgs/s", r.Scenario, r.Messages, r.Bytes, *r.MsgsPerS)
			}
			if !(0 < *r.P50Ms && *r.P50Ms <= *r.P99Ms && *r.P99Ms <= *r.P999Ms) {
				t.Errorf("%s: p50 %v p99 %v p999 %v", r.Scenario, *r.P50Ms, *r.P99Ms, *r.P999Ms)
			}
			if *r.NotPutOK != 0 {
				t.Errorf("%s: %d puts not PUT_OK", r.Scenario, *r.NotPutOK)
			}
			// CPU per message: this process only (the library runs the
			// master and the slave here).
			if r.ProcessCPUPerMsg == nil || *r.ProcessCPUPerMsg < 0 || m["master_cpu_us_per_msg"] != nil || m["slave_cpu_us_per_msg"] != nil {
				t.Errorf("%s: CPU per message process %v master %v slave %v", r.Scenario, m["process_cpu_us_per_msg"], m["master_cpu_us_per_msg"], m["slave_cpu_us_per_msg"])
			}
			if r.Scenario == Sync && m["lag_p99_ms"] != nil {
				t.Errorf("sync: lag_p99_ms is not null: %s", b)
			}
			if r.Scenario == Async && (r.LagP99Ms == nil || *r.LagSamples == 0 || *r.LagP99Ms < 0) {
				t.Errorf("async: no lag samples: %s", b)
			}
		}
	}
	var table bytes.Buffer
	if err := WriteTable(&table, got); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"limits (same run): loopback TCP", "catchup", "sync", "async", "lag p99 ms"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if !strings.Contains(progress.String(), "# limits: loopback TCP") {
		t.Errorf("progress lacks the limits:\n%s", progress.String())
	}
}

// TestRunsMedian: with --runs 3 each result is the median of three runs.
func TestRunsMedian(t *testing.T) {
	cfg := tiny(t)
	cfg.Scenarios = []string{Catchup, Sync}
	cfg.Producers = []int{2}
	cfg.Runs = 3
	var got []Result
	cfg.Emit = func(r Result) { got = append(got, r) }
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		if r.Runs != 3 || len(r.MBPerSRuns) != 3 || len(r.RatioRuns) != 3 || *r.MBPerS != median(r.MBPerSRuns) {
			t.Errorf("%s: runs %d, %v -> %v", r.Scenario, r.Runs, r.MBPerSRuns, *r.MBPerS)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Scenarios: []string{"nope"}}, "unknown scenario"},
		{Config{Via: []string{"api"}}, "needs the replicator binary"},
		{Config{Via: []string{"library"}, Stores: []string{"external"}}, "needs --plugins DIR"},
		{Config{Via: []string{"library"}, Stores: []string{"external"}, PluginsDir: t.TempDir()}, "no plugin binary"},
		{Config{Via: []string{"library"}, Producers: []int{0}}, "producers 0"},
		{Config{Via: []string{"library"}, SegmentSize: 1000}, "multiple of 4096"},
		{Config{Via: []string{"api"}, Exe: "/bin/true", Size: 1 << 30, SegmentSize: 64 << 20}, "one segment of at least"},
	} {
		err := Run(context.Background(), c.cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

// TestCanceled: a canceled context stops Run with its error.
func TestCanceled(t *testing.T) {
	cfg := tiny(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Run(ctx, cfg); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
}

func TestCatchupSegment(t *testing.T) {
	for _, size := range []int64{1, 4 << 20, 1 << 30, 4 << 30} {
		seg := catchupSegment(size)
		if seg%(1<<20) != 0 || seg < size+size/64+(1<<20) {
			t.Errorf("catchupSegment(%d) = %d", size, seg)
		}
	}
}

// TestLagSamplerCountsBacklog: a sample the slave never holds before the
// run ends is reported with the time it waited, not dropped; one it holds
// is reported with its own lag.
func TestLagSamplerCountsBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		held := int64(100) // the slave holds everything below
		s := newLagSampler(func(ctx context.Context, next int64) (time.Time, error) {
			if next <= held {
				time.Sleep(3 * time.Millisecond)
				return time.Now(), nil
			}
			<-ctx.Done()
			return time.Time{}, ctx.Err()
		})
		ctx, cancel := context.WithCancel(context.Background())
		s.start(ctx)
		synctest.Wait()
		s.onPut(0, 50, time.Now())
		time.Sleep(LagEvery + 10*time.Millisecond)
		synctest.Wait()
		s.onPut(0, 500, time.Now()) // never held
		time.Sleep(2 * time.Second)
		lags, err := s.finish(cancel)
		if err != nil || len(lags) != 2 || lags[0] != 3*time.Millisecond || lags[1] != 2*time.Second {
			t.Fatalf("lags %v, %v; want [3ms 2s]", lags, err)
		}
	})
}

// TestCatchupPoll: the status polls of a catch-up via the API close in on
// its end and stay within their bounds.
func TestCatchupPoll(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	const total = 1 << 30
	cases := []struct {
		name    string
		t0      time.Time
		el      time.Duration
		o0, cur int64
		want    time.Duration
	}{
		{"no answer yet", time.Time{}, 0, 0, 0, catchupPollMin},
		{"no time elapsed", t0, 0, 0, 0, catchupPollMin},
		{"no progress", t0, 50 * time.Millisecond, 1 << 20, 1 << 20, catchupPollMax},
		{"far from the end", t0, 100 * time.Millisecond, 0, total / 10, catchupPollMax},
		// 100 ms for 1/2: the other half takes 100 ms, a quarter is 25 ms.
		{"half way", t0, 100 * time.Millisecond, 0, total / 2, catchupPollMax},
		// 63/64 of the log in 1.26 s: the last 64th takes 20 ms, a quarter is 5 ms.
		{"near the end", t0, 1260 * time.Millisecond, 0, total - total/64, 5 * time.Millisecond},
		{"at the end", t0, time.Second, 0, total - 1<<10, catchupPollMin},
	}
	for _, c := range cases {
		got := catchupPoll(c.t0, c.t0.Add(c.el), c.o0, c.cur, total)
		if d := got - c.want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("%s: catchupPoll = %v, want %v", c.name, got, c.want)
		}
	}
}
