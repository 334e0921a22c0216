package core

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/replicatorhq/replicator/transport/memtransport"
)

func startSlave(t *testing.T, st *memStore, tr *pipeTransport, cfg SlaveConfig) *SlaveNode {
	t.Helper()
	cfg.MasterAddr = testMasterAddr
	if cfg.Logger == nil {
		cfg.Logger, _ = newTestLogger(t)
	}
	s, err := NewSlave(st, tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	return s
}

// fakeMaster listens where slaves dial and hands out their connections.
func fakeMaster(t *testing.T, tr *pipeTransport) net.Listener {
	t.Helper()
	ln, err := tr.Listen(testMasterAddr)
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func accept(t *testing.T, ln net.Listener) net.Conn {
	t.Helper()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCoreSlaveReportsAndIdleClose: first report at once, then every 5 s,
// idle close after 20 s without reading, reconnect 5 s later.
func TestCoreSlaveReportsAndIdleClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1 << 20)
		st.fill(t, 0, 1000)
		tr := newPipeTransport()
		ln := fakeMaster(t, tr)
		defer ln.Close()
		log, lb := newTestLogger(t)
		s := startSlave(t, st, tr, SlaveConfig{Logger: log})
		defer s.Close()
		c := accept(t, ln)
		start := time.Now()
		for i, at := range []time.Duration{0, 5 * time.Second, 10 * time.Second, 15 * time.Second} {
			if v := readReport(t, c); v != 1000 || time.Since(start) != at {
				t.Fatalf("report %d: %d at %v, want 1000 at %v", i, v, time.Since(start), at)
			}
		}
		// The 20 s report and the idle close fall at the same instant.
		if rest := expectClosed(t, c); (len(rest) != 0 && !bytes.Equal(rest, be64(1000))) || time.Since(start) != 20*time.Second {
			t.Fatalf("closed after %v with %d more bytes, want close at 20s", time.Since(start), len(rest))
		}
		if n := lb.count("closing idle master connection"); n != 1 {
			t.Fatalf("%d idle log lines", n)
		}
		synctest.Wait()
		if st := s.Status(); st.Connected || st.AckSent != 1000 || st.LastError == "" {
			t.Fatalf("status after idle close: %+v", st)
		}
		c2 := accept(t, ln)
		defer c2.Close()
		if d := time.Since(start); d != 25*time.Second {
			t.Fatalf("reconnected after %v, want 25s", d)
		}
		if v := readReport(t, c2); v != 1000 || time.Since(start) != 25*time.Second {
			t.Fatalf("first report after reconnect %d at %v", v, time.Since(start))
		}
		synctest.Wait()
		if st := s.Status(); !st.Connected || st.Reconnects != 1 {
			t.Fatalf("status after reconnect: %+v", st)
		}
	})
}

// TestCoreSlaveAppliesAndReportsPerBatch: an empty slave takes any first
// offset; it reports once per applied batch that grew its offset; a
// heartbeat at its max offset does nothing.
func TestCoreSlaveAppliesAndReportsPerBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1 << 20)
		tr := newPipeTransport()
		ln := fakeMaster(t, tr)
		defer ln.Close()
		reg := prometheus.NewPedanticRegistry()
		s := startSlave(t, st, tr, SlaveConfig{Registerer: reg})
		defer s.Close()
		c := accept(t, ln)
		defer c.Close()
		if v := readReport(t, c); v != 0 {
			t.Fatalf("empty slave reported %d", v)
		}
		start := time.Now()
		const base = 3 << 20 // not where the slave's log starts: it is empty
		if _, err := c.Write(encodeFrame(base, pattern(base, 100))); err != nil {
			t.Fatal(err)
		}
		if v := readReport(t, c); v != base+100 {
			t.Fatalf("report %d, want %d", v, base+100)
		}
		// Three frames and a heartbeat in one write: one report, of the end.
		var batch []byte
		off := int64(base + 100)
		for _, n := range []int{10, 20, 30} {
			batch = append(batch, encodeFrame(off, pattern(off, n))...)
			off += int64(n)
		}
		batch = append(batch, encodeFrame(off, nil)...)
		if _, err := c.Write(batch); err != nil {
			t.Fatal(err)
		}
		if v := readReport(t, c); v != off {
			t.Fatalf("report %d, want %d", v, off)
		}
		if time.Since(start) != 0 {
			t.Fatal("reports were not immediate")
		}
		// The next report is the periodic one, 5 s after the last.
		if v := readReport(t, c); v != off || time.Since(start) != 5*time.Second {
			t.Fatalf("report %d at %v, want %d at 5s", v, time.Since(start), off)
		}
		if got := st.bytesAt(base, off); !bytes.Equal(got, pattern(base, int(off-base))) {
			t.Fatal("slave log differs from what was shipped")
		}
		synctest.Wait()
		if got := testutil.ToFloat64(s.met.recvFrames); got != 4 {
			t.Fatalf("received frames %v, want 4", got)
		}
		if got := testutil.ToFloat64(s.met.recvBytes); got != 160 {
			t.Fatalf("received bytes %v, want 160", got)
		}
		if got := testutil.ToFloat64(s.met.heartbeats); got != 1 {
			t.Fatalf("heartbeats %v, want 1", got)
		}
		if st := s.Status(); st.AckSent != off || st.MaxOffset != off || !st.Connected || st.LastFrameTime.IsZero() {
			t.Fatalf("status %+v", st)
		}
	})
}

// TestCoreSlaveFramesSplitAnywhere feeds the same frames split in two at
// every byte position, and one byte per write.
func TestCoreSlaveFramesSplitAnywhere(t *testing.T) {
	var stream []byte
	off := int64(0)
	for _, n := range []int{30, 0, 20, 1, 0, 7} {
		stream = append(stream, encodeFrame(off, pattern(off, n))...)
		off += int64(n)
	}
	end := off
	splits := [][][]byte{}
	for k := 1; k < len(stream); k++ {
		splits = append(splits, [][]byte{stream[:k], stream[k:]})
	}
	var single [][]byte
	for i := range stream {
		single = append(single, stream[i:i+1])
	}
	splits = append(splits, single)
	for i, parts := range splits {
		synctest.Test(t, func(t *testing.T) {
			st := newMemStore(1 << 20)
			tr := newPipeTransport()
			ln := fakeMaster(t, tr)
			defer ln.Close()
			s := startSlave(t, st, tr, SlaveConfig{})
			defer s.Close()
			c := accept(t, ln)
			defer c.Close()
			readReport(t, c)
			go func() {
				for _, p := range parts {
					if _, err := c.Write(p); err != nil {
						return
					}
				}
			}()
			for {
				v := readReport(t, c)
				if v > end {
					t.Fatalf("case %d: report %d beyond %d", i, v, end)
				}
				if v == end {
					break
				}
			}
			if got := st.bytesAt(0, end); !bytes.Equal(got, pattern(0, int(end))) {
				t.Fatalf("case %d: slave log differs", i)
			}
			if s.Status().LastError != "" {
				t.Fatalf("case %d: error %q", i, s.Status().LastError)
			}
		})
	}
}

// TestCoreSlaveDropsConnection: every frame that must drop the connection,
// with its one log line; the slave reconnects 5 s later.
func TestCoreSlaveDropsConnection(t *testing.T) {
	hdr := func(off int64, size int32) []byte {
		b := encodeFrame(off, nil)
		b[8], b[9], b[10], b[11] = byte(size>>24), byte(size>>16), byte(size>>8), byte(size)
		return b
	}
	cases := []struct {
		name    string
		maxBody int
		frame   []byte
		log     string
		errIs   error
	}{
		{"data offset mismatch", 0, encodeFrame(2000, []byte("x")), "master pushed offset not equal", ErrOffsetMismatch},
		{"heartbeat offset mismatch", 0, encodeFrame(999, nil), "master pushed offset not equal", ErrOffsetMismatch},
		{"size above 4 MiB - 12", 0, hdr(1000, 4<<20), "malformed frame", nil},
		{"size above MaxFrameBody", 1000, hdr(1000, 1001), "malformed frame", nil},
		{"negative size", 0, hdr(1000, -1), "malformed frame", nil},
		{"negative offset", 0, hdr(-1000, 1), "malformed frame", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newMemStore(1 << 20)
				st.fill(t, 0, 1000)
				tr := newPipeTransport()
				ln := fakeMaster(t, tr)
				defer ln.Close()
				log, lb := newTestLogger(t)
				reg := prometheus.NewPedanticRegistry()
				s := startSlave(t, st, tr, SlaveConfig{Logger: log, MaxFrameBody: tc.maxBody, Registerer: reg})
				defer s.Close()
				c := accept(t, ln)
				readReport(t, c)
				start := time.Now()
				go c.Write(tc.frame)
				if rest := expectClosed(t, c); len(rest) != 0 || time.Since(start) != 0 {
					t.Fatalf("slave sent %d bytes, closed after %v", len(rest), time.Since(start))
				}
				synctest.Wait()
				if n := lb.count(tc.log); n != 1 {
					t.Fatalf("%d log lines with %q", n, tc.log)
				}
				if st.Bounds().Max != 1000 {
					t.Fatal("slave appended a rejected frame")
				}
				if tc.errIs == ErrOffsetMismatch && testutil.ToFloat64(s.met.mismatches) != 1 {
					t.Fatal("mismatch not counted")
				}
				c2 := accept(t, ln)
				defer c2.Close()
				if time.Since(start) != DefaultReconnectDelay {
					t.Fatalf("reconnect after %v", time.Since(start))
				}
				if v := readReport(t, c2); v != 1000 {
					t.Fatalf("report after reconnect %d", v)
				}
			})
		})
	}
}

// TestCoreSlaveSegmentOverflow: a frame crossing the slave's own segment end
// (segment sizes differ) is reported once in the log and in Status.
func TestCoreSlaveSegmentOverflow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1000)
		st.fill(t, 0, 900)
		tr := newPipeTransport()
		ln := fakeMaster(t, tr)
		defer ln.Close()
		log, lb := newTestLogger(t)
		s := startSlave(t, st, tr, SlaveConfig{Logger: log})
		defer s.Close()
		for range 3 {
			c := accept(t, ln)
			readReport(t, c)
			go c.Write(encodeFrame(900, pattern(900, 200)))
			expectClosed(t, c)
			synctest.Wait()
			if se := s.Status().SegmentError; !strings.Contains(se, "segment sizes differ") {
				t.Fatalf("SegmentError %q", se)
			}
		}
		if n := lb.count("frame crosses the slave's segment end"); n != 1 {
			t.Fatalf("%d segment-error log lines, want 1", n)
		}
		// A master with matching segments clears it.
		c := accept(t, ln)
		defer c.Close()
		readReport(t, c)
		c.Write(encodeFrame(900, pattern(900, 100)))
		if v := readReport(t, c); v != 1000 {
			t.Fatalf("report %d", v)
		}
		if se := s.Status().SegmentError; se != "" {
			t.Fatalf("SegmentError %q after a good frame", se)
		}
	})
}

func TestCoreSlaveConnectFailureRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1 << 20)
		tr := newPipeTransport()
		log, lb := newTestLogger(t)
		reg := prometheus.NewPedanticRegistry()
		s := startSlave(t, st, tr, SlaveConfig{Logger: log, Registerer: reg})
		defer s.Close()
		start := time.Now()
		// Attempts at 0, 50 ms, 150 ms, 350 ms, 750 ms, 1.55 s, 3.15 s,
		// 6.35 s and 11.35 s: the first retries back off from 50 ms up
		// to ReconnectDelay (TestCoreSlaveRetriesQuicklyUntilUp).
		time.Sleep(12 * time.Second)
		synctest.Wait()
		if n := lb.count("connect to master failed"); n != 9 {
			t.Fatalf("%d failed connects, want 9", n)
		}
		if st := s.Status(); st.Connected || st.Reconnects != 8 || !strings.Contains(st.LastError, "connect") {
			t.Fatalf("status %+v", st)
		}
		ln := fakeMaster(t, tr)
		defer ln.Close()
		c := accept(t, ln)
		defer c.Close()
		if time.Since(start) != 16350*time.Millisecond {
			t.Fatalf("connected at %v", time.Since(start))
		}
		readReport(t, c)
		synctest.Wait()
		if got := testutil.ToFloat64(s.met.connected); got != 1 {
			t.Fatalf("connected gauge %v", got)
		}
		if got := testutil.ToFloat64(s.met.reconnects); got != 9 {
			t.Fatalf("reconnects %v", got)
		}
	})
}

func TestCoreSlaveConnectTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1 << 20)
		tr := memtransport.NewNetwork(memtransport.Config{Backlog: 1}).Transport("node")
		ln := fakeMaster(t, tr) // listening, never accepting, backlog full: Dial hangs
		defer ln.Close()
		defer dial(t, tr).Close()
		log, lb := newTestLogger(t)
		s := startSlave(t, st, tr, SlaveConfig{Logger: log})
		defer s.Close()
		time.Sleep(DefaultConnectTimeout + time.Second)
		synctest.Wait()
		if n := lb.count("connect to master failed"); n != 1 {
			t.Fatalf("%d failed connects after the connect timeout", n)
		}
		if !strings.Contains(s.Status().LastError, context.DeadlineExceeded.Error()) {
			t.Fatalf("LastError %q", s.Status().LastError)
		}
	})
}

func TestCoreSlaveStoreFailureStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1 << 20)
		st.fill(t, 0, 100)
		tr := newPipeTransport()
		ln := fakeMaster(t, tr)
		defer ln.Close()
		log, lb := newTestLogger(t)
		s := startSlave(t, st, tr, SlaveConfig{Logger: log})
		defer s.Close()
		c := accept(t, ln)
		readReport(t, c)
		st.Close()
		go c.Write(encodeFrame(100, []byte("abc")))
		expectClosed(t, c)
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := lb.count("replication stopped: the store failed"); n != 1 {
			t.Fatalf("%d stop lines", n)
		}
		if st := s.Status(); st.Reconnects != 0 || st.Connected {
			t.Fatalf("status %+v", st)
		}
	})
}

func TestCoreSlaveWriteProtectionAndLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1 << 20)
		tr := newPipeTransport()
		s, err := NewSlave(st, tr, SlaveConfig{MasterAddr: testMasterAddr})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(context.Background(), testMsg(1)); !errors.Is(err, ErrSlaveWriteProtected) {
			t.Fatalf("Put on a slave: %v", err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); !errors.Is(err, ErrAlreadyStarted) {
			t.Fatalf("second Start: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); !errors.Is(err, ErrClosed) {
			t.Fatalf("Start after Close: %v", err)
		}
		if st.Bounds().Max != 0 {
			t.Fatal("slave wrote")
		}
	})
}

func TestCoreConfigValidate(t *testing.T) {
	if _, err := NewSlave(newMemStore(1), newPipeTransport(), SlaveConfig{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("slave without master address: %v", err)
	}
	if _, err := NewMaster(newMemStore(1), newPipeTransport(), MasterConfig{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("master without listen address: %v", err)
	}
	bad := []MasterConfig{
		{ListenAddr: "x", TransferBatchSize: 4 << 20},
		{ListenAddr: "x", SyncAcks: -1},
		{ListenAddr: "x", Role: Slave},
		{ListenAddr: "x", SlaveTimeout: -1},
	}
	for _, c := range bad {
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if err := (SlaveConfig{MasterAddr: "x", MaxFrameBody: 4 << 20}).Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("MaxFrameBody 4 MiB: %v", err)
	}
	if err := (MasterConfig{ListenAddr: "x"}).Validate(); err != nil {
		t.Error(err)
	}
	var _ io.Closer = (*Master)(nil)
	var _ io.Closer = (*SlaveNode)(nil)
}
