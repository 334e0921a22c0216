package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Modes of this test binary as a round trip's child (TestMain):
// echoExitArg exits 3 at once, echoHangArg never connects, echoNoChainArg
// relays but exits 3 as an echo.
const (
	echoExitArg    = "__rtt-echo-exit"
	echoHangArg    = "__rtt-echo-hang"
	echoNoChainArg = "__rtt-echo-nochain"
)

// testExe is this test binary, which TestMain turns into the echo child.
func testExe(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// TestRoundTripsAcrossProcesses measures both round trips with this test
// binary as the echoing child, over real loopback TCP, and checks that
// both were measured and that the child exited cleanly.
func TestRoundTripsAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	var l Limits
	c := LimitsConfig{RTTDuration: 40 * time.Millisecond, EchoCmd: []string{testExe(t)}}
	if err := roundTrips(context.Background(), dir, c, &l); err != nil {
		t.Fatal(err)
	}
	if l.RTTP50 <= 0 || l.RTTP99 < l.RTTP50 || l.RoundTrips <= 0 {
		t.Errorf("in process: p50 %v p99 %v, %v round trips/s", l.RTTP50, l.RTTP99, l.RoundTrips)
	}
	if l.XProcRTTP50 <= 0 || l.XProcRTTP99 < l.XProcRTTP50 {
		t.Errorf("across processes: p50 %v p99 %v", l.XProcRTTP50, l.XProcRTTP99)
	}
	if l.ChainRTTP50 <= 0 || l.ChainRTTP99 < l.ChainRTTP50 {
		t.Errorf("along three processes: p50 %v p99 %v", l.ChainRTTP50, l.ChainRTTP99)
	}
	for _, log := range []string{"rtt-echo.log", "rtt-relay.log", "rtt-chain-echo.log"} {
		if _, err := os.Stat(filepath.Join(dir, log)); err != nil {
			t.Errorf("a child's log: %v", err)
		}
	}
	// Without a child only the in-process round trip is measured.
	var l2 Limits
	if err := roundTrips(context.Background(), dir, LimitsConfig{RTTDuration: 10 * time.Millisecond}, &l2); err != nil {
		t.Fatal(err)
	}
	if l2.RTTP50 <= 0 || l2.XProcRTTP50 != 0 || l2.XProcRTTP99 != 0 || l2.ChainRTTP50 != 0 {
		t.Errorf("no child: in process p50 %v, across processes p50 %v p99 %v, chain %v", l2.RTTP50, l2.XProcRTTP50, l2.XProcRTTP99, l2.ChainRTTP50)
	}
}

// TestRoundTripsChainEchoExits checks that an echo child of the chain that
// exits without reaching the relay fails the measurement with its exit
// status and its log, and that the relay is stopped.
func TestRoundTripsChainEchoExits(t *testing.T) {
	dir := t.TempDir()
	c, stop, err := chainChildren(context.Background(), dir, []string{testExe(t), echoNoChainArg})
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || c != nil || stop != nil {
		t.Fatalf("chainChildren: conn %v, stop set %t, err %v; want the echo's exit status 3", c, stop != nil, err)
	}
	if !strings.Contains(err.Error(), filepath.Join(dir, "rtt-chain-echo.log")) {
		t.Errorf("err %v does not name the echo child's log", err)
	}
}

// TestRelay checks the relay in this process: it sends its port, relays
// 8-byte requests and answers, returns nil when the parent closes the
// connection and an error when the echo side closes its own.
func TestRelay(t *testing.T) {
	parent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer parent.Close()
	// start returns the relay's connection to the parent and to its echo.
	start := func(done chan<- error) (net.Conn, net.Conn) {
		go func() { done <- EchoChild(context.Background(), []string{relayArg, parent.Addr().String()}) }()
		p, err := parent.Accept()
		if err != nil {
			t.Fatal(err)
		}
		var b [8]byte
		if _, err := io.ReadFull(p, b[:]); err != nil {
			t.Fatal(err)
		}
		port := binary.LittleEndian.Uint64(b[:])
		e, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.FormatUint(port, 10)))
		if err != nil {
			t.Fatal(err)
		}
		return p, e
	}
	done := make(chan error, 1)
	p, e := start(done)
	var b, got [8]byte
	for i := range uint64(3) {
		binary.LittleEndian.PutUint64(b[:], 7+i)
		if _, err := p.Write(b[:]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(e, got[:]); err != nil || got != b {
			t.Fatalf("relayed %x (%v), want %x", got, err, b)
		}
		binary.LittleEndian.PutUint64(b[:], 100+i)
		if _, err := e.Write(b[:]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(p, got[:]); err != nil || got != b {
			t.Fatalf("answered %x (%v), want %x", got, err, b)
		}
	}
	p.Close()
	if err := <-done; err != nil {
		t.Fatalf("relay after the parent closed: %v", err)
	}
	if _, err := io.ReadFull(e, got[:]); !errors.Is(err, io.EOF) {
		t.Errorf("the echo side after the relay ended: %v, want EOF", err)
	}
	e.Close()

	p, e = start(done)
	defer p.Close()
	e.Close()
	if _, err := p.Write(b[:]); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "the echo child") {
		t.Fatalf("relay after the echo side closed: %v, want an error naming the echo child", err)
	}
	if err := EchoChild(context.Background(), []string{"a", "b", "c"}); !errors.Is(err, ErrConfig) {
		t.Errorf("EchoChild with 3 arguments: %v, want ErrConfig", err)
	}
}

// TestRoundTripsChildExits checks that a child that exits without
// connecting fails the measurement with its exit status and its log.
func TestRoundTripsChildExits(t *testing.T) {
	dir := t.TempDir()
	var l Limits
	c := LimitsConfig{RTTDuration: 10 * time.Millisecond, EchoCmd: []string{testExe(t), echoExitArg}}
	err := roundTrips(context.Background(), dir, c, &l)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("err %v, want the child's exit status 3", err)
	}
	if !strings.Contains(err.Error(), filepath.Join(dir, "rtt-echo.log")) {
		t.Errorf("err %v does not name the child's log", err)
	}
}

// TestRoundTripsCancelled checks that the end of ctx while the child has
// not connected stops the child and returns ctx's error.
func TestRoundTripsCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c, stop, err := echoChild(ctx, t.TempDir(), []string{testExe(t), echoHangArg})
	if !errors.Is(err, context.Canceled) || c != nil || stop != nil {
		t.Fatalf("echoChild: conn %v, stop set %t, err %v; want context.Canceled", c, stop != nil, err)
	}
}

// TestEcho checks the child's side in this process: it echoes 8-byte
// requests, returns nil when the parent closes the connection and ctx's
// error when ctx ends.
func TestEcho(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() { done <- Echo(context.Background(), ln.Addr().String()) }()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	var b, got [8]byte
	for i := range uint64(3) {
		binary.LittleEndian.PutUint64(b[:], 1000+i)
		if _, err := c.Write(b[:]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, got[:]); err != nil {
			t.Fatal(err)
		}
		if got != b {
			t.Fatalf("echo %x, want %x", got, b)
		}
	}
	c.Close()
	if err := <-done; err != nil {
		t.Fatalf("Echo after the parent closed: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- Echo(ctx, ln.Addr().String()) }()
	c, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Echo after ctx ended: %v, want context.Canceled", err)
	}
}

// TestFloor checks the floor and the ratios of each kind of point, and
// that the table shows them.
func TestFloor(t *testing.T) {
	r := &runner{limits: Limits{RTTP50: 20 * time.Microsecond, RTTP99: 40 * time.Microsecond,
		XProcRTTP50: 30 * time.Microsecond, XProcRTTP99: 60 * time.Microsecond,
		ChainRTTP50: 80 * time.Microsecond, ChainRTTP99: 200 * time.Microsecond}}
	runs := []run{{p50: 240 * time.Microsecond, p99: time.Millisecond, p999: 2 * time.Millisecond, hasLat: true, hasMsgs: true}}
	point := func(sc, via string) Result {
		return r.summarize(Result{Scenario: sc, Via: via, Store: StoreBuiltin, Producers: ptr(1)}, runs)
	}
	near := func(what string, got *float64, want float64) {
		t.Helper()
		if got == nil || *got < want*0.999999 || *got > want*1.000001 {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}
	for _, tc := range []struct {
		sc, via string
		links   int
	}{{Sync, ViaClient, 2}, {Sync, ViaAPI, 2}, {Async, ViaClient, 1}} {
		res := point(tc.sc, tc.via)
		name := tc.sc + " via " + tc.via
		near(name+" xproc p50", res.RTTXProcP50Ms, 0.030)
		near(name+" xproc p99", res.RTTXProcP99Ms, 0.060)
		if res.FloorLinks == nil || *res.FloorLinks != tc.links {
			t.Errorf("%s: floor links %v, want %d", name, res.FloorLinks, tc.links)
		}
		near(name+" floor", res.FloorP50Ms, 0.030*float64(tc.links))
		near(name+" p50/rtt", res.P50PerRTT, 12)
		near(name+" p50/xproc", res.P50PerXProcRTT, 8)
		near(name+" p50/floor", res.P50PerFloor, 8/float64(tc.links))
		near(name+" chain p50", res.RTTChainP50Ms, 0.080)
		near(name+" chain p99", res.RTTChainP99Ms, 0.200)
		if tc.sc == Sync {
			near(name+" p50/chain", res.P50PerChainRTT, 3)
		} else if res.P50PerChainRTT != nil {
			t.Errorf("%s: p50/chain %v, want none", name, *res.P50PerChainRTT)
		}
	}
	lib := point(Sync, ViaLibrary)
	near("library p50/rtt", lib.P50PerRTT, 12)
	near("library p50/xproc", lib.P50PerXProcRTT, 8)
	if lib.FloorLinks != nil || lib.FloorP50Ms != nil || lib.P50PerFloor != nil || lib.P50PerChainRTT != nil {
		t.Errorf("library: floor %v %v %v %v, want none", lib.FloorLinks, lib.FloorP50Ms, lib.P50PerFloor, lib.P50PerChainRTT)
	}
	var tab bytes.Buffer
	if err := WriteTable(&tab, []Result{point(Sync, ViaClient), lib}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"; 8 B round trip across processes p50 0.030 ms, p99 0.060 ms (a put through the daemons crosses 1 such link, a sync put 2: floor 0.060 ms); along 3 processes (relay, echo) p50 0.080 ms, p99 0.200 ms\n\n",
		"12.0 / 8.0 / 4.0 / 3.0", "12.0 / 8.0 / - / -"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}

	// Without the cross-process round trip: no floor, no line.
	r.limits.XProcRTTP50, r.limits.XProcRTTP99, r.limits.ChainRTTP50, r.limits.ChainRTTP99 = 0, 0, 0, 0
	res := point(Sync, ViaClient)
	if res.RTTXProcP50Ms != nil || res.FloorP50Ms != nil || res.P50PerXProcRTT != nil || res.RTTChainP50Ms != nil || res.P50PerChainRTT != nil {
		t.Errorf("no cross-process round trip: %v %v %v %v %v", res.RTTXProcP50Ms, res.FloorP50Ms, res.P50PerXProcRTT, res.RTTChainP50Ms, res.P50PerChainRTT)
	}
	near("p50/rtt", res.P50PerRTT, 12)
	tab.Reset()
	if err := WriteTable(&tab, []Result{res}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(tab.String(), "across processes") || !strings.Contains(tab.String(), "12.0 / - / - / -") {
		t.Errorf("table without the cross-process round trip:\n%s", tab.String())
	}
}

// TestRunRoundTripAcrossProcesses runs a sync point with the echo child
// and checks the new keys of its JSON line.
func TestRunRoundTripAcrossProcesses(t *testing.T) {
	cfg := tiny(t)
	cfg.Scenarios, cfg.Producers = []string{Sync}, []int{1}
	cfg.Limits.EchoCmd = []string{testExe(t)}
	var got []Result
	cfg.Emit = func(r Result) { got = append(got, r) }
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d results, want 1", len(got))
	}
	res := got[0]
	if res.RTTXProcP50Ms == nil || *res.RTTXProcP50Ms <= 0 || *res.RTTXProcP99Ms < *res.RTTXProcP50Ms {
		t.Fatalf("cross-process round trip p50 %v p99 %v", res.RTTXProcP50Ms, res.RTTXProcP99Ms)
	}
	if res.P50PerXProcRTT == nil || *res.P50PerXProcRTT != *res.P50Ms / *res.RTTXProcP50Ms ||
		res.P50PerRTT == nil || *res.P50PerRTT != *res.P50Ms / *res.RTTP50Ms {
		t.Errorf("ratios: p50 %v, per rtt %v, per cross-process rtt %v", *res.P50Ms, res.P50PerRTT, res.P50PerXProcRTT)
	}
	if res.RTTChainP50Ms == nil || *res.RTTChainP50Ms <= 0 || *res.RTTChainP99Ms < *res.RTTChainP50Ms {
		t.Errorf("round trip along three processes p50 %v p99 %v", res.RTTChainP50Ms, res.RTTChainP99Ms)
	}
	if res.FloorP50Ms != nil || res.P50PerFloor != nil || res.P50PerChainRTT != nil {
		t.Errorf("library point with a floor: %v %v %v", res.FloorP50Ms, res.P50PerFloor, res.P50PerChainRTT)
	}
}
