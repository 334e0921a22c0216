//go:build linux

package node

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/pluginhost"
)

// raiseNoFile lifts the soft RLIMIT_NOFILE to at least n (up to the hard
// limit), restoring it at the end of the test.
func raiseNoFile(t *testing.T, n uint64) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= n {
		return
	}
	old := lim
	lim.Cur = min(n, lim.Max)
	if lim.Cur < n {
		t.Skipf("RLIMIT_NOFILE hard limit %d is below the %d this test needs", lim.Max, n)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

func memInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

func rssBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

// Hostile-peer test parameters.
const (
	floodConns      = 2000
	floodIPs        = 40  // 50 connections from each, below the per-IP limit
	floodDialers    = 200 // goroutines dialing at once
	hostileMaxConns = 512
	hostileIdle     = 3 * time.Second
	// memBound bounds the growth of heap and stacks while the master holds
	// hostileMaxConns idle connections (about 20-40 KiB each).
	memBound = 64 << 20
)

var warnLine = regexp.MustCompile(`\[(WARN|ERROR)\]`)

// TestHostilePeers runs a sync master node (commit log, builtin tcp
// transport, the daemon's connection limits) with a real slave node, both
// over loopback TCP, and throws hostile connections at the master's HA
// port while a producer keeps writing: garbage, a partial header then
// silence, an ack beyond the master's offset, and a flood of 2000
// connections from 40 addresses. Each bad connection is closed with one
// warning; the slave keeps replicating (every put PUT_OK) and ends
// byte-identical; memory stays bounded.
func TestHostilePeers(t *testing.T) {
	t0 := time.Now()
	phase := func(name string) { t.Logf("%6.2fs %s", time.Since(t0).Seconds(), name) }
	raiseNoFile(t, 3*floodConns+1000)
	var logs logBuf
	dir := t.TempDir()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	base := Config{Listen: "127.0.0.1:0", SegmentSize: 1 << 20, Registry: pluginhost.Builtin(), Version: "test", Logger: logs.logger()}

	mc := base
	mc.Role, mc.DataDir, mc.HAListen = core.SyncMaster, filepath.Join(dir, "m"), "127.0.0.1:0"
	mc.SlaveTimeout = 10 * time.Second
	mc.HAIdleTimeout = hostileIdle
	mc.HA.MaxConns, mc.HA.MaxConnsPerIP = hostileMaxConns, 64
	m := startNode(t, mc)
	mURL := m.n.URL()
	ha := m.n.master.Addr()

	sc := base
	sc.Role, sc.DataDir, sc.MasterHA = core.Slave, filepath.Join(dir, "s"), ha
	sc.HAReportInterval, sc.ReconnectDelay = 200*time.Millisecond, 50*time.Millisecond
	s := startNode(t, sc)
	eventually(t, "slave connected", 10*time.Second, func() error {
		if n := len(nodeStatus(t, hc, mURL).Slaves); n != 1 {
			return fmt.Errorf("%d slaves", n)
		}
		return nil
	})

	// A producer writes sync puts all along; each must be PUT_OK.
	var puts, notOK atomic.Int64
	var lastNotOK atomic.Value
	stopProd := make(chan struct{})
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		for i := 0; ; i++ {
			select {
			case <-stopProd:
				return
			default:
			}
			resp, err := hc.Post(mURL+"/v1/topics/Hostile/messages", "", strings.NewReader(fmt.Sprintf("message %d %s", i, strings.Repeat("x", i%700))))
			if err != nil {
				notOK.Add(1)
				lastNotOK.Store(err.Error())
				continue
			}
			var ans api.PutAnswer
			json.NewDecoder(resp.Body).Decode(&ans)
			resp.Body.Close()
			puts.Add(1)
			if ans.Status != "PUT_OK" {
				notOK.Add(1)
				lastNotOK.Store(fmt.Sprintf("%d %s", resp.StatusCode, ans.Status))
			}
		}
	}()
	defer func() {
		select {
		case <-stopProd:
		default:
			close(stopProd)
		}
		<-prodDone
	}()

	// 1. Single hostile peers, each from an address of its own.
	maxOff := nodeStatus(t, hc, mURL).MaxOffset
	type peer struct {
		name, ip string
		send     func(c net.Conn)
		wantLog  string // in its one warning
	}
	peers := []peer{
		{"garbage", "127.0.0.3", func(c net.Conn) { c.Write(bytes.Repeat([]byte{0xff, 0x13, 0x37}, 100)) }, "negative offset"},
		{"partial header then silence", "127.0.0.5", func(c net.Conn) { c.Write([]byte{0, 0, 0}) }, "closing idle slave connection"},
		{"ack beyond the master's offset", "127.0.0.6", func(c net.Conn) {
			// Request offset 0, wait for the first frame (so the next value
			// arrives in a read of its own), then ack far beyond the log.
			c.Write(report(0))
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(c, make([]byte, 12)); err != nil {
				return
			}
			c.Write(report(maxOff + 1<<30))
		}, "ack beyond master max offset"},
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(peers))
	addrs := make([]string, len(peers))
	for i, p := range peers {
		c, err := dialFrom(t, p.ip, ha)
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = c.LocalAddr().String()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			p.send(c)
			if err := waitClosed(c, hostileIdle+10*time.Second); err != nil {
				errs <- fmt.Errorf("%s: %w", p.name, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, p := range peers {
		// The connection's close line is written once both its goroutines
		// ended, just after the socket closed.
		eventually(t, p.name+" logged", 5*time.Second, func() error {
			if len(logs.lines(addrs[i], p.wantLog)) == 0 {
				return fmt.Errorf("no %q line; lines of %s:\n%s", p.wantLog, addrs[i], strings.Join(logs.lines(addrs[i]), "\n"))
			}
			return nil
		})
		var warn []string
		for _, l := range logs.lines(addrs[i]) {
			if warnLine.MatchString(l) {
				warn = append(warn, l)
			}
		}
		if len(warn) != 1 {
			t.Errorf("%s: %d warnings, want 1:\n%s", p.name, len(warn), strings.Join(logs.lines(addrs[i]), "\n"))
		}
		t.Logf("%s: %d log lines in all (%d warning)", p.name, len(logs.lines(addrs[i])), len(warn))
	}

	phase("single peers done")
	// 2. A flood: 2000 connections from 40 addresses, held open and silent.
	reg := m.n.Registry()
	metric := func(name string, labels ...string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		next:
			for _, m := range mf.GetMetric() {
				for j := 0; j+1 < len(labels); j += 2 {
					found := false
					for _, lp := range m.GetLabel() {
						found = found || (lp.GetName() == labels[j] && lp.GetValue() == labels[j+1])
					}
					if !found {
						continue next
					}
				}
				if c := m.GetCounter(); c != nil {
					return c.GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
		return 0
	}
	putsBefore := puts.Load()
	acceptsBefore := metric("replicator_transport_tcp_accepts_total")
	memBefore, rssBefore := memInUse(), rssBytes()
	// Sample the open connections and memory while the flood arrives
	// (without a GC: garbage included, an upper bound).
	var peakOpen float64
	var peakMem, peakRSS uint64
	sample := func() {
		open := metric("replicator_transport_tcp_open_connections")
		if open > hostileMaxConns {
			t.Errorf("%v open connections, over the limit of %d", open, hostileMaxConns)
		}
		peakOpen = max(peakOpen, open)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peakMem = max(peakMem, ms.HeapInuse+ms.StackInuse)
		peakRSS = max(peakRSS, rssBytes())
	}
	stopSampling, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			sample()
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()
	conns := make([][]net.Conn, floodDialers)
	var dialErrs, resetAtDial atomic.Int64
	resetsFrom := make([]atomic.Int64, floodIPs) // per source address
	var firstDialErr atomic.Value
	for i := range floodDialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ip := fmt.Sprintf("127.0.1.%d", i%floodIPs+1)
			for range floodConns / floodDialers {
				c, err := dialFrom(t, ip, ha)
				if errors.Is(err, syscall.ECONNRESET) {
					resetAtDial.Add(1) // refused before connect returned
					resetsFrom[i%floodIPs].Add(1)
					continue
				}
				if err != nil {
					if dialErrs.Add(1) == 1 {
						firstDialErr.Store(err.Error())
					}
					continue
				}
				conns[i] = append(conns[i], c)
			}
		}()
	}
	wg.Wait()
	defer func() {
		for _, cs := range conns {
			for _, c := range cs {
				c.Close()
			}
		}
	}()
	if n := dialErrs.Load(); n > 0 {
		t.Fatalf("%d dials failed; first: %v", n, firstDialErr.Load())
	}
	eventually(t, "every flood connection accepted or refused", 30*time.Second, func() error {
		refused := metric("replicator_transport_tcp_refused_total", "reason", "max_conns")
		accepted := metric("replicator_transport_tcp_accepts_total") - acceptsBefore
		if n := refused + accepted; n < floodConns { // resets at dial are refusals too
			return fmt.Errorf("%v of %d handled", n, floodConns)
		}
		return nil
	})
	close(stopSampling)
	<-sampled
	phase("flood handled")
	growth := int64(peakMem) - int64(memBefore)
	t.Logf("flood: %d connections (%d reset before connect returned), at most %v open (limit %d), %v refused; peak heap+stacks %+.1f MiB (bound %d MiB), peak RSS %+.1f MiB",
		floodConns, resetAtDial.Load(), peakOpen, hostileMaxConns,
		metric("replicator_transport_tcp_refused_total", "reason", "max_conns"),
		float64(growth)/(1<<20), memBound>>20, (float64(peakRSS)-float64(rssBefore))/(1<<20))
	if peakOpen > 1 {
		t.Logf("about %.0f KiB per open connection", float64(growth)/1024/(peakOpen-1))
	}
	if metric("replicator_transport_tcp_refused_total", "reason", "max_conns") == 0 {
		t.Errorf("the connection limit was never reached: the flood was too slow to test it")
	}
	if growth > memBound {
		t.Errorf("heap and stacks grew by %d MiB under the flood, over %d MiB", growth>>20, memBound>>20)
	}

	// The real slave keeps being served while the flood is held open.
	eventually(t, "puts complete during the flood", 20*time.Second, func() error {
		if puts.Load() < putsBefore+50 {
			return fmt.Errorf("%d puts since the flood began", puts.Load()-putsBefore)
		}
		return nil
	})

	// Every flood connection is closed by the master: refused at once, or
	// idle after hostileIdle.
	for _, cs := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, c := range cs {
				if err := waitClosed(c, hostileIdle+20*time.Second); err != nil {
					errs2 <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs2:
		t.Fatal(err)
	default:
	}
	// Every flood connection is logged: its idle close (one warning each),
	// or its refusal, whose warnings are rate-limited per address (one per
	// tcptransport.RefusalLogInterval, the next saying how many were
	// suppressed): refusal lines plus the suppressed they report never
	// exceed the refusals, and an address with refusals has at least one
	// line. Counted per source IP: a port is reused by later connections,
	// and a connection refused before connect returned (reset at dial) has
	// no local address to match but was logged or counted too.
	eventually(t, "flood connections logged", 10*time.Second, func() error {
		perIP := map[string]int{}
		refusalLines := map[string]int{}
		re := regexp.MustCompile(`(127\.0\.1\.\d+):\d+`)
		sup := regexp.MustCompile(` suppressed=(\d+)`)
		for _, l := range logs.lines() {
			if !warnLine.MatchString(l) {
				continue
			}
			n := 1
			refusal := strings.Contains(l, "refusing HA connection")
			if m := sup.FindStringSubmatch(l); refusal && m != nil {
				k, _ := strconv.Atoi(m[1])
				n += k
			}
			for _, m := range re.FindAllStringSubmatch(l, -1) {
				perIP[m[1]] += n
				if refusal {
					refusalLines[m[1]]++
				}
			}
		}
		for ip, n := range refusalLines {
			if n > 3 {
				return fmt.Errorf("%s: %d refusal warnings for one burst: not rate-limited", ip, n)
			}
		}
		opened := map[string]int{}
		for _, cs := range conns {
			for _, c := range cs {
				opened[c.LocalAddr().(*net.TCPAddr).IP.String()]++
			}
		}
		var bad []string
		for i := range floodIPs {
			ip, resets := fmt.Sprintf("127.0.1.%d", i+1), int(resetsFrom[i].Load())
			if n := opened[ip] + resets; perIP[ip] > n || perIP[ip] == 0 {
				bad = append(bad, fmt.Sprintf("%s: %d connections (%d reset at dial), %d logged or reported suppressed", ip, n, resets, perIP[ip]))
			}
		}
		if len(bad) > 0 {
			return fmt.Errorf("%d flood addresses logged wrongly (none, or more than one line per connection):\n%s", len(bad), strings.Join(bad[:min(len(bad), 5)], "\n"))
		}
		return nil
	})

	phase("flood closed and logged")
	// 3. The slave ends byte-identical, and every put was PUT_OK.
	close(stopProd)
	<-prodDone
	if n := notOK.Load(); n > 0 {
		t.Fatalf("%d of %d puts not PUT_OK (last: %v)", n, puts.Load(), lastNotOK.Load())
	}
	var mst api.Status
	eventually(t, "slave caught up", 20*time.Second, func() error {
		mst = nodeStatus(t, hc, mURL)
		sst := nodeStatus(t, hc, s.n.URL())
		if sst.MaxOffset != mst.MaxOffset {
			return fmt.Errorf("master %d, slave %d", mst.MaxOffset, sst.MaxOffset)
		}
		return nil
	})
	if len(mst.Slaves) != 1 {
		t.Fatalf("master sees %d slaves after the attack, want 1: %+v", len(mst.Slaves), mst.Slaves)
	}
	t.Logf("%d puts, all PUT_OK; slave at %d", puts.Load(), mst.MaxOffset)
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if err := m.stop(); err != nil {
		t.Fatal(err)
	}
	compareSegments(t, mc.DataDir, sc.DataDir, mst.MaxOffset)
	_ = testutil.ToFloat64
	_ = binary.BigEndian
}

var errs2 = make(chan error, floodIPs)

// TestHostileMaster points a real slave node at a fake master that sends
// frame headers with a huge, a negative and an oversized size field: the
// slave allocates nothing for them, closes each connection with one
// warning, stores nothing, reconnects, and still serves its API.
func TestHostileMaster(t *testing.T) {
	var logs logBuf
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	s := startNode(t, Config{
		Role: core.Slave, DataDir: t.TempDir(), Listen: "127.0.0.1:0", MasterHA: ln.Addr().String(),
		SegmentSize: 1 << 20, Registry: pluginhost.Builtin(), Logger: logs.logger(),
		ReconnectDelay: 10 * time.Millisecond,
	})
	memBefore := memInUse()
	headers := []struct {
		name string
		size int32
	}{
		{"huge size", 0x7fffffff},
		{"negative size", -1},
		{"just over 4 MiB", 4<<20 - 12 + 1},
	}
	for _, h := range headers {
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		// The slave's first report is its request offset.
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, 8)); err != nil {
			t.Fatalf("%s: reading the slave's report: %v", h.name, err)
		}
		hdr := make([]byte, 12)
		binary.BigEndian.PutUint64(hdr, 0)
		binary.BigEndian.PutUint32(hdr[8:], uint32(h.size))
		c.Write(hdr)
		if err := waitClosed(c, 10*time.Second); err != nil {
			t.Fatalf("%s: the slave kept the connection: %v", h.name, err)
		}
		c.Close()
	}
	growth := int64(memInUse()) - int64(memBefore)
	t.Logf("heap+stacks growth after the malformed frames: %+.1f MiB", float64(growth)/(1<<20))
	if growth > 8<<20 {
		t.Fatalf("the slave's memory grew by %d MiB", growth>>20)
	}
	// The slave reconnects after each (a fourth connection arrives) ...
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// ... logged one warning per malformed frame, stored nothing, serves.
	eventually(t, "warnings", 5*time.Second, func() error {
		if n := len(logs.lines("malformed frame")); n != len(headers) {
			return fmt.Errorf("%d malformed-frame lines, want %d:\n%s", n, len(headers), logs.String())
		}
		return nil
	})
	if n := len(logs.lines("[WARN]")) + len(logs.lines("[ERROR]")); n != len(headers) {
		t.Fatalf("%d warnings, want %d:\n%s", n, len(headers), logs.String())
	}
	st := nodeStatus(t, hc, s.n.URL())
	if st.MaxOffset != 0 {
		t.Fatalf("the slave stored %d bytes", st.MaxOffset)
	}
}
