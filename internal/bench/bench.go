package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"
)

// Scenario, via and store names.
const (
	Catchup = "catchup"
	Sync    = "sync"
	Async   = "async"

	ViaAPI     = "api"
	ViaLibrary = "library"
	// ViaClient: the daemons as child processes, the producers through the
	// producer stream (package client, client.go); sync and async only.
	ViaClient = "client"

	StoreBuiltin  = "builtin"
	StoreExternal = "external"
)

// PluginBinary is the file name of the external commit-log store plugin.
const PluginBinary = "replicator-store-commitlog"

// Defaults of Config.
const (
	DefaultSize        = 1 << 30
	DefaultMsgSize     = 1 << 10
	DefaultDuration    = 5 * time.Second
	DefaultSegmentSize = 1 << 30 // sync and async: the daemon's default
	DefaultQuietMax    = 5 * time.Second
	DefaultQuietBusy   = 25.0 // percent
	LagEvery           = 2 * time.Millisecond
	RSSEvery           = 50 * time.Millisecond
)

// DefaultProducers are the producer counts of the sync and async scenarios.
var DefaultProducers = []int{1, 16, 64}

// ErrConfig wraps every configuration error of Run.
var ErrConfig = errors.New("bench: invalid configuration")

// Config configures Run. Zero values take the defaults.
type Config struct {
	Scenarios []string // Catchup, Sync, Async (default all three)
	Via       []string // ViaAPI, ViaClient, ViaLibrary (default all three)
	Stores    []string // StoreBuiltin, StoreExternal (default builtin)
	Size      int64    // catch-up log size (DefaultSize)
	Producers []int    // sync and async (DefaultProducers)
	MsgSize   int      // message body size (DefaultMsgSize)
	Duration  time.Duration
	// Peers are measured after the scenarios, in the same run: PeerRedis
	// next to sync (redis.go). Default none.
	Peers []string
	// MaxLag is the async master's back-pressure (core.MasterConfig.MaxLag,
	// the daemon's --max-lag); 0: none, RocketMQ's behaviour.
	MaxLag int64
	// Warmup runs before each measured sync/async point, unmeasured
	// (default Duration/5, at most 1s; negative: none).
	Warmup time.Duration
	// Runs repeats every point; results are medians (default 1).
	Runs int
	// SegmentSize of the commit logs. 0: for catchup, one segment that holds
	// the whole log (a daemon master ships a fresh slave its last segment
	// only, as RocketMQ 4.x); for sync and async DefaultSegmentSize.
	SegmentSize int64
	// Dir is where the scratch directory is made (default os.TempDir());
	// the disk limits are measured there.
	Dir string
	// Keep leaves the scratch directory in place.
	Keep bool
	// Exe is the replicator binary whose children the api runs use.
	Exe string
	// PluginsDir holds PluginBinary for the external store.
	PluginsDir string
	// Limits sizes the limit measurements; nil Limits skips nothing.
	Limits LimitsConfig
	// QuietMax bounds the wait, before each measured point, for the
	// machine to be under QuietBusy percent busy (default DefaultQuietMax;
	// negative: no wait). The busy share seen is reported.
	QuietMax  time.Duration
	QuietBusy float64
	// ProfileDir, when set, receives a CPU and an allocation profile of
	// this process for each measured point (library runs profile the
	// master and slave; api runs profile the producers), and for api and
	// client points (catch-up included) a CPU profile of the master and the
	// slave daemons (started with --pprof), NAME.master.cpu.pprof and
	// NAME.slave.cpu.pprof.
	ProfileDir string
	// Progress receives progress lines (nil: none).
	Progress io.Writer
	// Emit receives each result as soon as it is measured.
	Emit func(Result)
	// Protocols are the HA protocols (--ha-protocol of the child nodes) the
	// api and client runs use, one after the other for each point, so that
	// they compare in the same run: ProtocolClassic, ProtocolAutoSwitch
	// (default classic). Library runs use classic only.
	Protocols []string
}

// HA protocols of Config.Protocols.
const (
	ProtocolClassic    = "classic"
	ProtocolAutoSwitch = "autoswitch"
)

func (c *Config) defaults() error {
	if len(c.Scenarios) == 0 {
		c.Scenarios = []string{Catchup, Sync, Async}
	}
	if len(c.Via) == 0 {
		c.Via = []string{ViaAPI, ViaClient, ViaLibrary}
	}
	if len(c.Stores) == 0 {
		c.Stores = []string{StoreBuiltin}
	}
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if len(c.Producers) == 0 {
		c.Producers = DefaultProducers
	}
	if c.MsgSize == 0 {
		c.MsgSize = DefaultMsgSize
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Warmup == 0 {
		c.Warmup = min(c.Duration/5, time.Second)
	}
	if c.Runs == 0 {
		c.Runs = 1
	}
	if c.QuietMax == 0 {
		c.QuietMax = DefaultQuietMax
	}
	if c.QuietBusy == 0 {
		c.QuietBusy = DefaultQuietBusy
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if len(c.Protocols) == 0 {
		c.Protocols = []string{ProtocolClassic}
	}
	for _, p := range c.Protocols {
		if p != ProtocolClassic && p != ProtocolAutoSwitch {
			return fmt.Errorf("%w: unknown HA protocol %q (want classic or autoswitch)", ErrConfig, p)
		}
	}
	c.Limits.defaults()
	for _, s := range c.Scenarios {
		if s != Catchup && s != Sync && s != Async {
			return fmt.Errorf("%w: unknown scenario %q (want catchup, sync or async)", ErrConfig, s)
		}
	}
	for _, v := range c.Via {
		if v != ViaAPI && v != ViaLibrary && v != ViaClient {
			return fmt.Errorf("%w: unknown --via %q (want api, client or library)", ErrConfig, v)
		}
		if (v == ViaAPI || v == ViaClient) && c.Exe == "" {
			return fmt.Errorf("%w: --via %s needs the replicator binary", ErrConfig, v)
		}
	}
	for _, p := range c.Peers {
		if p != PeerRedis {
			return fmt.Errorf("%w: unknown peer %q (want redis)", ErrConfig, p)
		}
		if !slices.Contains(c.Scenarios, Sync) {
			return fmt.Errorf("%w: the redis peer is measured with the sync scenario", ErrConfig)
		}
	}
	for _, s := range c.Stores {
		switch s {
		case StoreBuiltin:
		case StoreExternal:
			if c.PluginsDir == "" {
				return fmt.Errorf("%w: --store external needs --plugins DIR holding %s (make plugins builds bin/plugins)", ErrConfig, PluginBinary)
			}
			p := filepath.Join(c.PluginsDir, PluginBinary)
			if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
				return fmt.Errorf("%w: --store external: no plugin binary %s (make plugins builds it)", ErrConfig, p)
			}
		default:
			return fmt.Errorf("%w: unknown --store %q (want builtin or external)", ErrConfig, s)
		}
	}
	for _, p := range c.Producers {
		if p < 1 {
			return fmt.Errorf("%w: producers %d < 1", ErrConfig, p)
		}
	}
	switch {
	case c.Size < 1:
		return fmt.Errorf("%w: size %d < 1", ErrConfig, c.Size)
	case c.MsgSize < 1:
		return fmt.Errorf("%w: message size %d < 1", ErrConfig, c.MsgSize)
	case c.Duration < 0:
		return fmt.Errorf("%w: duration %v < 0", ErrConfig, c.Duration)
	case c.Runs < 1:
		return fmt.Errorf("%w: runs %d < 1", ErrConfig, c.Runs)
	case c.SegmentSize < 0 || c.SegmentSize%4096 != 0:
		return fmt.Errorf("%w: segment size %d: want a multiple of 4096", ErrConfig, c.SegmentSize)
	case c.SegmentSize > 0 && int64(c.MsgSize)+4096 > c.SegmentSize/2:
		return fmt.Errorf("%w: message size %d does not fit half a %d-byte segment", ErrConfig, c.MsgSize, c.SegmentSize)
	case slices.Contains(c.Scenarios, Catchup) && slices.Contains(c.Via, ViaAPI) && c.SegmentSize > 0 && c.SegmentSize < catchupSegment(c.Size):
		return fmt.Errorf("%w: catchup --via api needs one segment of at least %d bytes for a %d-byte log (a daemon master ships a fresh slave only its last segment); leave --segment-size unset", ErrConfig, catchupSegment(c.Size), c.Size)
	}
	return nil
}

// catchupSegment is the smallest segment size (a multiple of 1 MiB) that
// holds a catch-up log of size bytes in one segment.
func catchupSegment(size int64) int64 {
	const mib = 1 << 20
	need := size + size/64 + mib
	return (need + mib - 1) / mib * mib
}

// Run measures the limits, then every scenario point of cfg, sending each
// result to cfg.Emit. It stops at the first error; ctx's end stops it
// (children stopped, scratch directory removed).
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(cfg.Dir, "replicator-bench-")
	if err != nil {
		return fmt.Errorf("bench: scratch directory: %w", err)
	}
	r := &runner{cfg: cfg, dir: dir}
	r.progress("scratch directory %s; %d CPUs, GOMAXPROCS %d", dir, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	err = r.run(ctx)
	if cfg.Keep {
		r.progress("kept %s", dir)
	} else if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
		err = fmt.Errorf("bench: removing %s: %w", dir, rerr)
	}
	return err
}

// runner is one Run.
type runner struct {
	cfg    Config
	dir    string
	limits Limits
	// master log for catchup, filled once (builtin) and reused
	catchDir string
	catchMax int64
	catchSeg int64
	// protocol is the HA protocol of the children being measured;
	// byPoint the msgs/s or MB/s of each classic point, to compare.
	protocol string
	byPoint  map[string]float64
}

func (r *runner) progress(format string, args ...any) {
	fmt.Fprintf(r.cfg.Progress, "# "+format+"\n", args...)
}

func (r *runner) emit(res Result) {
	if res.Protocol == "" {
		res.Protocol = ProtocolClassic
		if res.Via != ViaLibrary && r.protocol != "" {
			res.Protocol = r.protocol
		}
	}
	r.compareProtocols(res)
	if r.cfg.Emit != nil {
		r.cfg.Emit(res)
	}
}

func (r *runner) run(ctx context.Context) error {
	var err error
	r.progress("measuring the limits (loopback TCP, round trip, disk of %s)", r.dir)
	if r.limits, err = Measure(ctx, r.dir, r.cfg.Limits); err != nil {
		return err
	}
	l := r.limits
	r.progress("limits: loopback TCP %.0f MB/s; 8 B round trip p50 %.3f ms p99 %.3f ms; disk sequential %.0f MB/s (fdatasync every 4 MiB), %.0f fdatasync/s (4 KiB, p50 %.3f ms p99 %.3f ms); page-cache fill %.0f MB/s (fresh file, no sync)",
		l.TCPMBps, ms(l.RTTP50), ms(l.RTTP99), l.DiskWriteMBps, l.FdatasyncPerSec, ms(l.FdatasyncP50), ms(l.FdatasyncP99), l.PageWriteMBps)
	if l.XProcRTTP50 > 0 {
		r.progress("limits: 8 B round trip across processes p50 %.3f ms p99 %.3f ms (%.2f x in process); a sync put through the daemons crosses 2 such links: floor %.3f ms = %.2f x the in-process round trip; along 3 processes (relay, echo) p50 %.3f ms p99 %.3f ms = %.2f x",
			ms(l.XProcRTTP50), ms(l.XProcRTTP99), float64(l.XProcRTTP50)/float64(l.RTTP50), 2*ms(l.XProcRTTP50), 2*float64(l.XProcRTTP50)/float64(l.RTTP50),
			ms(l.ChainRTTP50), ms(l.ChainRTTP99), float64(l.ChainRTTP50)/float64(l.RTTP50))
	}
	for _, sc := range r.cfg.Scenarios {
		for _, st := range r.cfg.Stores {
			for _, via := range r.cfg.Via {
				if err := ctx.Err(); err != nil {
					return err
				}
				var err error
				if sc == Catchup && via == ViaClient {
					// No producers in a catch-up: --via api covers it.
					continue
				}
				for _, proto := range r.cfg.Protocols {
					if proto != ProtocolClassic && via == ViaLibrary {
						continue // the library runs build classic masters and slaves
					}
					r.protocol = proto
					if len(r.cfg.Protocols) > 1 {
						r.progress("%s via %s, %s store: HA protocol %s", sc, via, st, proto)
					}
					if sc == Catchup {
						err = r.catchup(ctx, via, st)
					} else {
						err = r.load(ctx, sc, via, st)
					}
					if err != nil {
						return fmt.Errorf("bench: %s via %s, %s store, %s protocol: %w", sc, via, st, proto, err)
					}
				}
			}
		}
	}
	if slices.Contains(r.cfg.Peers, PeerRedis) {
		if err := r.redisPeer(ctx); err != nil {
			return fmt.Errorf("bench: redis peer: %w", err)
		}
	}
	return nil
}

// ms converts d to float milliseconds.
func ms(d time.Duration) float64 { return float64(d) / 1e6 }
