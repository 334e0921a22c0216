package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/replicatorhq/replicator/internal/bench"
	"github.com/replicatorhq/replicator/internal/config"
)

// benchOpts are the options of `replicator bench`.
type benchOpts struct {
	Size        int64
	Producers   []string
	MsgSize     int64
	MaxLag      int64
	Duration    time.Duration
	Via         []string
	Store       []string
	Peers       []string // redis
	Runs        int
	SegmentSize int64
	Dir         string
	QuietWait   time.Duration
	LimitSize   int64
	LimitTime   time.Duration
	Profile     string
	JSON        bool
	Keep        bool
	HAProtocol  string // autoswitch: every api/client point with both protocols
}

func oneOf(choices ...string) func(string) error {
	return func(s string) error {
		for _, c := range choices {
			if s == c {
				return nil
			}
		}
		return fmt.Errorf("invalid value %q (want one of %v)", s, choices)
	}
}

func checkProducers(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 4096 {
		return fmt.Errorf("invalid producer count %q (want 1 to 4096)", s)
	}
	return nil
}

func benchCommand(b *benchOpts) *config.Command {
	return &config.Command{
		Name:     "bench",
		Synopsis: "measure replication speed on this machine next to its limits",
		Args:     "[SCENARIO...]",
		MaxArgs:  -1,
		Help: `Measure replication on this machine with real processes and real loopback
sockets, next to the machine's limits measured in the same run, and print a
table (or, with --json, one JSON object per line per scenario point).
Progress goes to standard error.

Scenarios (default: all three):
  catchup  a master holding a log of --size and a fresh slave: MB/s until the
           slave's offset matches the master's; peak RSS of both
  sync     --producers concurrent producers of --msg-size messages for
           --duration on a SYNC_MASTER with one slave: msgs/s, MB/s, put
           latency p50/p99/p99.9
  async    the same on an ASYNC_MASTER, plus the replication lag (put
           returned -> held by the slave) p50/p99

--via api runs the master and the slave as child processes of this binary
and puts through the master's HTTP API, one request per message; --via
client runs the same children and puts through the producer stream (package
client: one producer, its sends batched; sync and async only); --via library runs them in this
process through the library API (core), over loopback TCP. --store external
uses the commit-log store as a plugin binary (DIR/replicator-store-commitlog,
from --plugins DIR, else ./plugins beside this binary; 'make plugins' builds
bin/plugins).

Limits, measured first: raw loopback TCP (a plain Go sender and receiver of
32 KiB frames; the catch-up measures it again before each run, on the same
byte count); the 8-byte round trip with both ends in this process, with the
echoing end in a child process (a put through the daemons crosses one such
link, producer to master, and a sync put a second, master to slave) and
along three processes (this one, a relay child, an echo child: a sync put
through the daemons with no processing); and the data directory's disk:
sequential writes with fdatasync every 4 MiB, 4 KiB write+fdatasync per
second, and filling a fresh file's page-cache pages (32 KiB writes, no
sync: the least a slave does with each byte it receives). Each result shows
its ratio to loopback TCP, to the disk and to the page-cache fill.

JSON keys: scenario, via, store, producers, msg_size, duration_s,
size_bytes, segment_size, runs, messages, bytes, elapsed_s, mb_per_s,
msgs_per_s, max_lag_bytes, p50_ms, p99_ms, p999_ms, not_put_ok, lag_p50_ms, lag_p99_ms,
lag_max_ms, lag_samples, limit, limit_mb_per_s, ratio_to_limit,
disk_write_mb_per_s, ratio_to_disk, page_write_mb_per_s, ratio_to_page_write,
disk_fdatasync_per_s, tcp_rtt_p50_ms,
tcp_rtt_p99_ms, tcp_rtt_xproc_p50_ms, tcp_rtt_xproc_p99_ms (across two
processes), tcp_rtt_chain_p50_ms, tcp_rtt_chain_p99_ms (along three),
floor_links, floor_p50_ms (api and client points: the links a put crosses
x the cross-process round trip), p50_per_rtt, p50_per_rtt_xproc,
p50_per_floor, p50_per_rtt_chain (sync api and client points), the
per-run figures (*_runs), peak memory
(master_/slave_/process_peak_rss_bytes, ..._rss_anon_bytes,
..._rss_file_bytes, master_/slave_plugin_peak_rss_bytes),
master_/slave_/process_cpu_us_per_msg (CPU per message of the daemons and
of this process), master_/slave_cpu_ns_per_kb (catchup via api: CPU per KB
received of each daemon), machine_busy_pct, cpus, time; null where a key
does not apply.`,
		Options: []*config.Option{
			{Name: "size", Meta: "SIZE", Help: "catchup: the master's log size", Default: "1GiB", Value: config.Size(&b.Size, 64<<10, 1<<40)},
			{Name: "producers", Meta: "N,...", Help: "sync and async: concurrent producer counts", Default: "1,16,64", Value: config.CSV(&b.Producers, checkProducers)},
			{Name: "msg-size", Meta: "SIZE", Help: "sync and async: message body size", Default: "1KiB", Value: config.Size(&b.MsgSize, 1, 4<<20)},
			{Name: "max-lag", Meta: "SIZE", Help: "async: the master's --max-lag back-pressure (0: none, as RocketMQ)", Default: "0", Value: config.Size(&b.MaxLag, 0, 1<<40)},
			{Name: "duration", Meta: "DURATION", Help: "sync and async: measuring time per producer count (after a warm-up of a fifth of it, at most 1s)", Default: "5s", Value: config.Duration(&b.Duration, 10*time.Millisecond, time.Hour)},
			{Name: "via", Meta: "api,client,library", Help: "through the daemon's HTTP API or its producer stream (package client; child processes) and/or the library in this process", Default: "api,client,library", Value: config.CSV(&b.Via, oneOf(bench.ViaAPI, bench.ViaClient, bench.ViaLibrary))},
			{Name: "store", Meta: "builtin,external", Help: "the builtin commit-log store and/or the same store as an external plugin", Default: "builtin", Value: config.CSV(&b.Store, oneOf(bench.StoreBuiltin, bench.StoreExternal))},
			{Name: "peers", Meta: "redis", Help: "also measure peers next to the sync scenario, same producer counts and run: redis (a redis-server master and replica from PATH: SET+WAIT 1 per round trip, and 16 SETs + WAIT per round trip)", Value: config.CSV(&b.Peers, oneOf(bench.PeerRedis))},
			{Name: "runs", Meta: "N", Help: "repetitions of each point; results are medians", Default: "1", Value: config.Int(&b.Runs, 1, 100)},
			{Name: "segment-size", Meta: "SIZE", Help: "commit-log segment size (default: catchup one segment holding the log, sync/async 1GiB)", Value: config.SizeMultiple(&b.SegmentSize, 64<<10, 64<<30, 4096)},
			{Name: "dir", Meta: "DIR", Help: "where the scratch directory goes (the disk limits are measured there; default the temp dir)", Value: config.Dir(&b.Dir, true)},
			{Name: "limit-size", Meta: "SIZE", Help: "limits: bytes streamed over loopback TCP (the disk writes half as much)", Default: "1GiB", Value: config.Size(&b.LimitSize, 64<<10, 64<<30)},
			{Name: "limit-time", Meta: "DURATION", Help: "limits: time of the round-trip and of the fdatasync measurement each", Default: "1s", Value: config.Duration(&b.LimitTime, 10*time.Millisecond, time.Minute)},
			{Name: "quiet-wait", Meta: "DURATION", Help: "before each measurement, wait up to this long for the machine to be under 25% busy (0: no wait)", Default: "5s", Value: config.Duration(&b.QuietWait, 0, 10*time.Minute)},
			{Name: "profile", Meta: "DIR", Help: "write a CPU and an allocation profile of this process per measured point into DIR, and CPU profiles of the daemons (--pprof) for points via the API or the client (catch-up included)", Value: config.Dir(&b.Profile, true)},
			{Name: "json", Help: "print one JSON object per line per scenario point instead of the table", Value: config.Bool(&b.JSON)},
			{Name: "keep", Help: "keep the scratch directory (data and node logs)", Value: config.Bool(&b.Keep)},
			{Name: "ha-protocol", Meta: "PROTOCOL", Help: "classic, or autoswitch: every api and client point runs with the classic and then the autoswitch HA protocol, and the progress says autoswitch's share of classic's rate", Default: "classic", Value: config.Enum(&b.HAProtocol, "classic", "autoswitch")},
		},
	}
}

// runBench is `replicator bench`.
func runBench(ctx context.Context, e *env) int {
	o := e.opts.bench
	if len(e.args) > 1 && e.args[0] == bench.EchoArg {
		return runBenchEcho(ctx, e, e.args[1:])
	}
	cfg := bench.Config{
		Scenarios:   e.args,
		Via:         o.Via,
		Stores:      o.Store,
		Peers:       o.Peers,
		Size:        o.Size,
		MsgSize:     int(o.MsgSize),
		MaxLag:      o.MaxLag,
		Duration:    o.Duration,
		Runs:        o.Runs,
		SegmentSize: o.SegmentSize,
		Dir:         o.Dir,
		Keep:        o.Keep,
		QuietMax:    o.QuietWait,
		Limits:      bench.LimitsConfig{TCPBytes: o.LimitSize, DiskBytes: o.LimitSize / 2, RTTDuration: o.LimitTime, FsyncDuration: o.LimitTime},
		ProfileDir:  o.Profile,
		Protocols:   []string{bench.ProtocolClassic},
		PluginsDir:  e.opts.global.Plugins,
		Progress:    e.stderr,
	}
	if o.QuietWait == 0 {
		cfg.QuietMax = -1
	}
	if o.HAProtocol == bench.ProtocolAutoSwitch {
		cfg.Protocols = append(cfg.Protocols, bench.ProtocolAutoSwitch)
	}
	for _, s := range o.Producers {
		n, _ := strconv.Atoi(s) // checked by checkProducers
		cfg.Producers = append(cfg.Producers, n)
	}
	exe, err := os.Executable()
	if err != nil {
		return e.fail("bench: finding this binary: %v", err)
	}
	cfg.Exe = exe
	cfg.Limits.EchoCmd = []string{exe, "bench"}
	if cfg.PluginsDir == "" {
		// bin/replicator next to bin/plugins, as `make build plugins` leaves them.
		if d := filepath.Join(filepath.Dir(exe), "plugins"); fileExists(filepath.Join(d, bench.PluginBinary)) {
			cfg.PluginsDir = d
		}
	}
	var results []bench.Result
	enc := json.NewEncoder(e.stdout)
	cfg.Emit = func(r bench.Result) {
		results = append(results, r)
		if o.JSON {
			enc.Encode(r)
		}
	}
	err = bench.Run(ctx, cfg)
	if !o.JSON && len(results) > 0 {
		bench.WriteTable(e.stdout, results)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(e.stderr, "replicator: bench: interrupted; nodes stopped")
		return 130
	}
	if err != nil {
		if errors.Is(err, bench.ErrConfig) {
			fmt.Fprintf(e.stderr, "replicator: %v\n", err)
			return exitUsage
		}
		return e.fail("%v", err)
	}
	return exitOK
}

// runBenchEcho is the bench's own child, started as `replicator bench
// EchoArg ARGS...` (not in the help): one end of the round trips across
// processes the bench measures next to its limits (bench.EchoChild).
func runBenchEcho(ctx context.Context, e *env, args []string) int {
	if err := bench.EchoChild(ctx, args); err != nil {
		return e.fail("%v", err)
	}
	return exitOK
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}
