package core_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/internal/benchload"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/core/epoch"
	"github.com/replicatorhq/replicator/plugins/commitlog"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/transport"
)

// benchSize parses REPLICATOR_BENCH_CATCHUP ("256MiB", "1GiB", bytes);
// default 256 MiB.
func benchSize(b *testing.B) int64 {
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
		b.Fatalf("REPLICATOR_BENCH_CATCHUP=%q: want bytes or a KiB/MiB/GiB size", os.Getenv("REPLICATOR_BENCH_CATCHUP"))
	}
	return n * mult
}

func benchLogOptions() commitlog.Options {
	opts := commitlog.DefaultOptions()
	opts.SegmentSize = 64 << 20
	return opts
}

// rawLoopback streams n bytes in 32 KiB writes over one loopback TCP
// connection (the figure of ../shared/bench/tcpframe) and returns MB/s.
func rawLoopback(b *testing.B, n int64) float64 {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		buf := make([]byte, transport.DefaultBatchSize+transport.HeaderSize)
		var got int64
		for got < n {
			k, err := io.ReadFull(c, buf)
			got += int64(k)
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, transport.DefaultBatchSize+transport.HeaderSize)
	start := time.Now()
	for sent := int64(0); sent < n; sent += int64(len(buf)) {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return float64(n) / time.Since(start).Seconds() / 1e6
}

// BenchmarkCatchUp replicates a log of REPLICATOR_BENCH_CATCHUP bytes
// (default 256 MiB; `make bench` uses 1 GiB) from a master to a fresh slave
// over loopback TCP, both on the commitlog store (64 MiB segments), and
// reports MB/s next to raw loopback TCP (32 KiB writes, as
// ../shared/bench/tcpframe) and to filling a fresh file's page-cache pages
// (benchload.RawPageWrite), both measured before each catch-up.
func BenchmarkCatchUp(b *testing.B) {
	size := benchSize(b)
	dir := b.TempDir()
	mlog, err := commitlog.Open(dir+"/master", benchLogOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer mlog.Close()
	ctx := context.Background()
	body := make([]byte, 4000)
	for mlog.Bounds().Max < size {
		if _, err := mlog.Append(ctx, &record.Message{Topic: "TopicBench", Body: body}); err != nil {
			b.Fatal(err)
		}
	}
	total := mlog.Bounds().Max
	// A master at rest: its flusher would otherwise still be writing back
	// the fill (msync of pages written through the mapping costs a TLB
	// shootdown each) during the first catch-up.
	for mlog.Bounds().Flushed < total {
		time.Sleep(10 * time.Millisecond)
	}
	tr := tcptransport.New(tcptransport.DefaultOptions())
	for _, proto := range []core.Protocol{core.ProtocolClassic, core.ProtocolAutoSwitch} {
		b.Run("protocol="+proto.String(), func(b *testing.B) {
			cfg := core.MasterConfig{ListenAddr: "127.0.0.1:0", StartFromFirstSegment: true, Protocol: proto}
			if proto == core.ProtocolAutoSwitch {
				cfg.Epochs = benchEpochs(b, dir+"/master", 1)
			}
			m, err := core.NewMaster(mlog, tr, cfg)
			if err != nil {
				b.Fatal(err)
			}
			if err := m.Start(); err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			benchCatchUp(b, m, tr, dir, total, benchLogOptions(), proto)
		})
	}
}

// benchEpochs opens dir's epoch file; with master set, it holds epoch 1
// from offset 0.
func benchEpochs(b *testing.B, dir string, master int32) *epoch.File {
	ep, err := epoch.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	if master > 0 && ep.Len() == 0 {
		if err := ep.Append(master, 0); err != nil {
			b.Fatal(err)
		}
	}
	return ep
}

// benchSlaveConfig is the slave configuration of a benchmark.
// openBenchLog opens a commit log in dir with benchLogOptions, closed when
// the benchmark ends.
func openBenchLog(b *testing.B, dir string) *commitlog.Log {
	l, err := commitlog.Open(dir, benchLogOptions())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// startBenchPair starts a master on mlog with mcfg and a slave on slog with
// scfg following it over loopback TCP, and waits for the slave to
// connect; both close when the benchmark ends.
func startBenchPair(b *testing.B, mlog store.Store, slog store.Log, mcfg core.MasterConfig, scfg core.SlaveConfig) (*core.Master, *core.SlaveNode) {
	tr := tcptransport.New(tcptransport.DefaultOptions())
	m, err := core.NewMaster(mlog, tr, mcfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	scfg.MasterAddr = m.Addr()
	s, err := core.NewSlave(slog, tr, scfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := m.WaitSlaves(context.Background(), 1); err != nil {
		b.Fatal(err)
	}
	return m, s
}

func benchSlaveConfig(b *testing.B, addr, dir string, proto core.Protocol) core.SlaveConfig {
	cfg := core.SlaveConfig{MasterAddr: addr, Protocol: proto, BrokerID: 2}
	if proto == core.ProtocolAutoSwitch {
		cfg.Epochs = benchEpochs(b, dir, 0)
	}
	return cfg
}

func waitMax(st interface{ Bounds() store.Bounds }, max int64) {
	for st.Bounds().Max < max {
		time.Sleep(200 * time.Microsecond)
	}
}

func benchCatchUp(b *testing.B, m *core.Master, tr *tcptransport.Transport, dir string, total int64, opts commitlog.Options, proto core.Protocol) {
	b.SetBytes(total)
	b.ResetTimer()
	var elapsed, cpu, rawCPU time.Duration
	var rawMBs, writeMBs float64
	for i := range b.N {
		b.StopTimer()
		// Raw loopback TCP for the same bytes, right before each catch-up,
		// so that both see the same machine load.
		c0 := processCPU()
		rawMBs += rawLoopback(b, total)
		rawCPU += processCPU() - c0
		// And the least the slave does with the bytes: fill fresh
		// page-cache pages of a file (32 KiB pwrites, no sync).
		w, err := benchload.RawPageWrite(context.Background(), dir, total)
		if err != nil {
			b.Fatal(err)
		}
		writeMBs += w
		sdir := fmt.Sprintf("%s/slave-%d", dir, i)
		slog, err := commitlog.Open(sdir, opts)
		if err != nil {
			b.Fatal(err)
		}
		s, err := core.NewSlave(slog, tr, benchSlaveConfig(b, m.Addr(), sdir, proto))
		if err != nil {
			b.Fatal(err)
		}
		stopProf := startCatchUpProfile(b)
		b.StartTimer()
		start := time.Now()
		c0 = processCPU()
		if err := s.Start(); err != nil {
			b.Fatal(err)
		}
		waitMax(slog, total)
		elapsed += time.Since(start)
		cpu += processCPU() - c0
		stopProf()
		b.StopTimer()
		s.Close()
		slog.Close()
		os.RemoveAll(sdir)
		b.StartTimer()
	}
	mbs := float64(total) * float64(b.N) / elapsed.Seconds() / 1e6
	raw := rawMBs / float64(b.N)
	b.ReportMetric(mbs, "catchup_MB/s")
	b.ReportMetric(raw, "raw_tcp_MB/s")
	b.ReportMetric(100*mbs/raw, "%_of_raw")
	b.ReportMetric(writeMBs/float64(b.N), "raw_write_MB/s")
	b.ReportMetric(100*mbs/(writeMBs/float64(b.N)), "%_of_write")
	// CPU time (user+system, all threads) per byte: steadier than MB/s on
	// a shared machine, and on a CPU-bound machine the ratio bounds the
	// throughput ratio.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(total*int64(b.N))*1e3, "cpu_ns/KB")
	b.ReportMetric(float64(rawCPU.Nanoseconds())/float64(total*int64(b.N))*1e3, "raw_cpu_ns/KB")
}

// startCatchUpProfile starts a CPU profile of the catch-up phase alone
// when REPLICATOR_BENCH_CPUPROFILE names a file (do not combine with
// -cpuprofile); each run appends its index to the name.
func startCatchUpProfile(b *testing.B) func() {
	name := os.Getenv("REPLICATOR_BENCH_CPUPROFILE")
	if name == "" {
		return func() {}
	}
	profRuns++
	f, err := os.Create(fmt.Sprintf("%s.%d", name, profRuns))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

var profRuns int

// processCPU is the process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSyncPut: 1 KiB messages put on a SYNC_MASTER with one slave
// (commitlog stores, loopback TCP) by 1, 16 and 64 concurrent producers.
func BenchmarkSyncPut(b *testing.B) {
	for _, proto := range []core.Protocol{core.ProtocolClassic, core.ProtocolAutoSwitch} {
		for _, producers := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("protocol=%s/producers=%d", proto, producers), func(b *testing.B) { benchSyncPut(b, proto, producers) })
		}
	}
}

func benchSyncPut(b *testing.B, proto core.Protocol, producers int) {
	dir := b.TempDir()
	mlog, slog := openBenchLog(b, dir+"/master"), openBenchLog(b, dir+"/slave")
	mcfg := core.MasterConfig{ListenAddr: "127.0.0.1:0", Role: core.SyncMaster, Protocol: proto, BrokerID: 1}
	if proto == core.ProtocolAutoSwitch {
		mcfg.Epochs = benchEpochs(b, dir+"/master", 1)
	}
	m, _ := startBenchPair(b, mlog, slog, mcfg, benchSlaveConfig(b, "", dir+"/slave", proto))
	ctx := context.Background()
	// Autoswitch: sync puts wait for the in-sync set; the slave
	// must have joined it.
	for proto == core.ProtocolAutoSwitch && len(m.Status().SyncStateSet) < 2 {
		time.Sleep(time.Millisecond)
	}
	benchload.SyncPuts(ctx, b, m, producers)
}
