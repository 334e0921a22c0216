package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/internal/benchload"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/pluginhost"
	"github.com/replicatorhq/replicator/plugins/commitlog"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/sdk/storeplugin"
	"github.com/replicatorhq/replicator/transport"
)

// The benchmarks of core (BenchmarkCatchUp, BenchmarkSyncPut) with the
// store builtin (linked in) and external (this package's binary as a
// go-plugin subprocess: appends batched on a stream, reads from what the
// acks bring back or from ReadStream), side by side. "external-mtls" adds AutoMTLS, which the
// daemon turns on.

const benchSegment = 64 << 20

func benchCatchUpSize(b *testing.B) int64 {
	s := os.Getenv("REPLICATOR_BENCH_CATCHUP")
	if s == "" {
		return 256 << 20
	}
	mult := int64(1)
	for suf, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if strings.HasSuffix(s, suf) {
			s, mult = strings.TrimSuffix(s, suf), m
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		b.Fatalf("REPLICATOR_BENCH_CATCHUP=%q", s)
	}
	return n * mult
}

var benchModes = []string{"builtin", "external", "external-mtls"}

// catchUpModes are BenchmarkPluginCatchUp's modes: benchModes, or the
// comma-separated list in REPLICATOR_BENCH_MODES, which may also name
// "external-slave" (a builtin master, an external slave) and
// "external-master" (the other way round), to tell the two halves' costs
// apart.
func catchUpModes() []string {
	if s := os.Getenv("REPLICATOR_BENCH_MODES"); s != "" {
		return strings.Split(s, ",")
	}
	return benchModes
}

// catchUpSides returns the master's and the slave's store modes of a
// BenchmarkPluginCatchUp mode.
func catchUpSides(mode string) (master, slave string) {
	switch mode {
	case "external-slave":
		return "builtin", "external"
	case "external-master":
		return "external", "builtin"
	}
	return mode, mode
}

// pluginPath links the test binary as replicator-store-commitlog.
func pluginPath(b testing.TB) string {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	p := filepath.Join(b.TempDir(), "replicator-store-commitlog")
	if err := os.Symlink(exe, p); err != nil {
		b.Fatal(err)
	}
	return p
}

// openMode opens a commit log in dir, builtin or through a plugin process.
func openMode(b testing.TB, mode, plugin, dir string) store.Store {
	b.Helper()
	if mode == "builtin" {
		o := commitlog.DefaultOptions()
		o.SegmentSize = benchSegment
		l, err := commitlog.Open(dir, o)
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	p, err := pluginhost.Launch(pluginhost.Candidate{Path: plugin, Kind: "store", Name: "commitlog"},
		pluginhost.LaunchOptions{AutoMTLS: mode == "external-mtls"})
	if err != nil {
		b.Fatal(err)
	}
	raw, err := p.Dispense()
	if err != nil {
		p.Kill()
		b.Fatal(err)
	}
	cl, err := raw.(*storeplugin.Conn).Open(context.Background(), storeplugin.OpenRequest{Dir: dir, SegmentSize: benchSegment}, benchClientConfig())
	if err != nil {
		p.Kill()
		b.Fatal(err)
	}
	return &procStore{Client: cl, p: p}
}

type procStore struct {
	*storeplugin.Client
	p *pluginhost.Process
}

func (s *procStore) Close() error {
	err := s.Client.Close()
	s.p.Kill()
	return err
}

// startCatchUpMaster starts a master of st on loopback that ships its log
// from the first segment (a fresh slave catches up from there).
func startCatchUpMaster(tb testing.TB, st store.Store, tr transport.Transport) *core.Master {
	tb.Helper()
	m, err := core.NewMaster(st, tr, core.MasterConfig{ListenAddr: "127.0.0.1:0", StartFromFirstSegment: true})
	if err != nil {
		tb.Fatal(err)
	}
	if err := m.Start(); err != nil {
		tb.Fatal(err)
	}
	return m
}

// startCatchUpSlave starts a slave of st following the master at addr.
func startCatchUpSlave(tb testing.TB, st store.Store, tr transport.Transport, addr string) *core.SlaveNode {
	tb.Helper()
	s, err := core.NewSlave(st, tr, core.SlaveConfig{MasterAddr: addr})
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Start(); err != nil {
		tb.Fatal(err)
	}
	return s
}

// BenchmarkPluginCatchUp: a fresh slave catches up with a master holding
// REPLICATOR_BENCH_CATCHUP bytes (default 256 MiB) over loopback TCP; both
// stores builtin or both external (or one of each: catchUpModes). With an
// external slave it also reports the plugin's wake-ups for the append
// ring (doorbells/MiB) and the host's waits on it (ringwaits/MiB).
func BenchmarkPluginCatchUp(b *testing.B) {
	size := benchCatchUpSize(b)
	plugin := pluginPath(b)
	// The master's log is written once, builtin (same files either way).
	mdir := filepath.Join(b.TempDir(), "master")
	{
		st := openMode(b, "builtin", "", mdir)
		body := make([]byte, 4000)
		for st.Bounds().Max < size {
			if _, err := st.Append(context.Background(), &record.Message{Topic: "TopicBench", Body: body}); err != nil {
				b.Fatal(err)
			}
		}
		st.Close()
	}
	for _, mode := range catchUpModes() {
		b.Run(mode, func(b *testing.B) {
			mmode, smode := catchUpSides(mode)
			mst := openMode(b, mmode, plugin, mdir)
			defer mst.Close()
			total := mst.Bounds().Max
			tr := tcptransport.New(tcptransport.DefaultOptions())
			m := startCatchUpMaster(b, mst, tr)
			defer m.Close()
			b.SetBytes(total)
			b.ResetTimer()
			var elapsed time.Duration
			var wakes, waits uint64 // the external slave's doorbells and ring waits
			for i := range b.N {
				b.StopTimer()
				sdir := filepath.Join(b.TempDir(), fmt.Sprint("slave-", i))
				sst := openMode(b, smode, plugin, sdir)
				grew := make(chan struct{}, 1)
				cancel := sst.Watch(grew)
				s, err := core.NewSlave(sst, tr, core.SlaveConfig{MasterAddr: m.Addr()})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				if err := s.Start(); err != nil {
					b.Fatal(err)
				}
				for sst.Bounds().Max < total {
					<-grew
				}
				elapsed += time.Since(start)
				b.StopTimer()
				if ps, ok := sst.(*procStore); ok {
					st := ps.Stats()
					wakes += st.Doorbells
					waits += st.RingWaits
				}
				cancel()
				s.Close()
				sst.Close()
				os.RemoveAll(sdir)
				b.StartTimer()
			}
			b.ReportMetric(float64(total)*float64(b.N)/elapsed.Seconds()/1e6, "catchup_MB/s")
			if smode != "builtin" {
				mib := float64(total) * float64(b.N) / (1 << 20)
				b.ReportMetric(float64(wakes)/mib, "doorbells/MiB")
				b.ReportMetric(float64(waits)/mib, "ringwaits/MiB")
			}
		})
	}
}

// BenchmarkPluginSyncPut: 1 KiB messages on a SYNC_MASTER with one slave
// by 1, 16 and 64 producers; both stores builtin or both external.
func BenchmarkPluginSyncPut(b *testing.B) {
	plugin := pluginPath(b)
	for _, mode := range benchModes {
		for _, producers := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/producers=%d", mode, producers), func(b *testing.B) {
				dir := b.TempDir()
				mst := openMode(b, mode, plugin, filepath.Join(dir, "master"))
				defer mst.Close()
				sst := openMode(b, mode, plugin, filepath.Join(dir, "slave"))
				defer sst.Close()
				tr := tcptransport.New(tcptransport.DefaultOptions())
				m, err := core.NewMaster(mst, tr, core.MasterConfig{ListenAddr: "127.0.0.1:0", Role: core.SyncMaster})
				if err != nil {
					b.Fatal(err)
				}
				if err := m.Start(); err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				s, err := core.NewSlave(sst, tr, core.SlaveConfig{MasterAddr: m.Addr()})
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Start(); err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				ctx := context.Background()
				if err := m.WaitSlaves(ctx, 1); err != nil {
					b.Fatal(err)
				}
				benchload.SyncPuts(ctx, b, m, producers)
			})
		}
	}
}

// benchClientConfig is the default client configuration, with
// REPLICATOR_BENCH_INFLIGHT overriding MaxInFlight and
// REPLICATOR_BENCH_CHUNK ChunkBytes and REPLICATOR_BENCH_BATCH BatchBytes
// (for tuning runs).
func benchClientConfig() storeplugin.ClientConfig {
	// As the daemon opens it (internal/pluginhost, async flush): framed
	// Appends; REPLICATOR_BENCH_FRAME=0 makes every Append wait for the plugin.
	cfg := storeplugin.ClientConfig{FrameAppends: os.Getenv("REPLICATOR_BENCH_FRAME") != "0"}
	if v, err := strconv.Atoi(os.Getenv("REPLICATOR_BENCH_INFLIGHT")); err == nil {
		cfg.MaxInFlight = v
	}
	if v, err := strconv.Atoi(os.Getenv("REPLICATOR_BENCH_CHUNK")); err == nil {
		cfg.ChunkBytes = v
	}
	if v, err := strconv.Atoi(os.Getenv("REPLICATOR_BENCH_BATCH")); err == nil {
		cfg.BatchBytes = v
	}
	return cfg
}
