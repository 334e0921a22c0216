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

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/pluginhost"
	"github.com/replicatorhq/replicator/plugins/commitlog"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/transportplugin"
	"github.com/replicatorhq/replicator/transport"
)

// BenchmarkPluginTransportCatchUp: a fresh slave catches up with a master
// holding REPLICATOR_BENCH_CATCHUP bytes (default 256 MiB) over loopback
// TCP, the transport builtin (linked in) or external (this package's binary
// as a plugin process per node: it listens and dials, the host moves the
// bytes on the sockets handed over). Stores are builtin on both sides, so
// the two modes differ only in the transport. Each round catches up once
// per mode; reports builtin_MB/s, external_MB/s and their ratio, which
// should be about 1 (the bytes never cross the plugin boundary).
func BenchmarkPluginTransportCatchUp(b *testing.B) {
	size := catchUpSize(b)
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	plugin := filepath.Join(b.TempDir(), "replicator-transport-tcp")
	if err := os.Symlink(exe, plugin); err != nil {
		b.Fatal(err)
	}
	const seg = 64 << 20
	mdir := filepath.Join(b.TempDir(), "master")
	o := commitlog.DefaultOptions()
	o.SegmentSize = seg
	mst, err := commitlog.Open(mdir, o)
	if err != nil {
		b.Fatal(err)
	}
	defer mst.Close()
	body := make([]byte, 4000)
	for mst.Bounds().Max < size {
		if _, err := mst.Append(context.Background(), &record.Message{Topic: "TopicBench", Body: body}); err != nil {
			b.Fatal(err)
		}
	}
	total := mst.Bounds().Max
	// One master and one slave-side transport per mode, alive for the whole
	// run; the rounds alternate the modes (and which goes first) so both
	// see the same machine load.
	modes := []string{"builtin", "external"}
	masters := map[string]*core.Master{}
	slaveTr := map[string]transport.Transport{}
	for _, mode := range modes {
		m, err := core.NewMaster(mst, newTransport(b, mode, plugin), core.MasterConfig{ListenAddr: "127.0.0.1:0", StartFromFirstSegment: true})
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Start(); err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		masters[mode], slaveTr[mode] = m, newTransport(b, mode, plugin)
	}
	elapsed := map[string]time.Duration{}
	b.SetBytes(2 * total)
	b.ResetTimer()
	for i := range b.N {
		for j := range modes {
			mode := modes[(i+j)%len(modes)]
			b.StopTimer()
			sdir := filepath.Join(b.TempDir(), fmt.Sprint("slave-", mode, i))
			sst, err := commitlog.Open(sdir, o)
			if err != nil {
				b.Fatal(err)
			}
			grew := make(chan struct{}, 1)
			cancel := sst.Watch(grew)
			s, err := core.NewSlave(sst, slaveTr[mode], core.SlaveConfig{MasterAddr: masters[mode].Addr()})
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
			elapsed[mode] += time.Since(start)
			b.StopTimer()
			cancel()
			s.Close()
			sst.Close()
			os.RemoveAll(sdir)
			b.StartTimer()
		}
	}
	rate := func(mode string) float64 { return float64(total) * float64(b.N) / elapsed[mode].Seconds() / 1e6 }
	b.ReportMetric(rate("builtin"), "builtin_MB/s")
	b.ReportMetric(rate("external"), "external_MB/s")
	b.ReportMetric(rate("external")/rate("builtin"), "external/builtin")
}

// newTransport returns the builtin TCP transport, or the plugin binary
// started and opened as the daemon does (stopped when b ends).
func newTransport(b *testing.B, mode, path string) transport.Transport {
	b.Helper()
	if mode == "builtin" {
		return tcptransport.New(tcptransport.DefaultOptions())
	}
	p, err := pluginhost.Launch(pluginhost.Candidate{Path: path, Kind: "transport", Name: "tcp"}, pluginhost.LaunchOptions{AutoMTLS: true})
	if err != nil {
		b.Fatal(err)
	}
	raw, err := p.Dispense()
	if err != nil {
		p.Kill()
		b.Fatal(err)
	}
	cl, err := raw.(*transportplugin.Conn).Open(context.Background(), transportplugin.OpenRequest{}, transportplugin.ClientConfig{})
	if err != nil {
		p.Kill()
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cl.Close()
		p.Kill()
	})
	return cl
}

func catchUpSize(b *testing.B) int64 {
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
