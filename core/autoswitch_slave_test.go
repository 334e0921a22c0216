package core

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"

	"github.com/replicatorhq/replicator/transport"
	"github.com/replicatorhq/replicator/transport/memtransport"
)

// readSlaveHS reads the slave's 16-byte handshake byte by byte.
func readSlaveHS(t *testing.T, c net.Conn) (id int64, fromLast, learner bool) {
	t.Helper()
	var b [16]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("read slave handshake: %v", err)
	}
	if st := binary.BigEndian.Uint32(b[:]); st != 1 {
		t.Fatalf("slave handshake state %d", st)
	}
	return int64(binary.BigEndian.Uint64(b[8:])), binary.BigEndian.Uint16(b[4:]) == 1, binary.BigEndian.Uint16(b[6:]) == 1
}

// readAck reads one 12-byte ack.
func readAck(t *testing.T, c net.Conn) int64 {
	t.Helper()
	var b [12]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("read ack: %v", err)
	}
	if st := binary.BigEndian.Uint32(b[:]); st != 2 {
		t.Fatalf("ack state %d", st)
	}
	return int64(binary.BigEndian.Uint64(b[4:]))
}

func writeMasterHS(t *testing.T, c net.Conn, maxOff int64, es ...transport.EpochEntry) {
	t.Helper()
	h := transport.MasterHandshake{MaxOffset: maxOff, Epochs: es}
	if len(es) > 0 {
		h.LastEpoch = es[len(es)-1].Epoch
	}
	b, err := transport.AppendMasterHandshake(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

func asFrameBytes(h transport.TransferHeader, body []byte) []byte {
	h.Size = int32(len(body))
	b := make([]byte, transport.TransferHeaderSize)
	transport.PutTransferHeader(b, h)
	return append(b, body...)
}

// TestASSlaveTruncatesToConsistentPoint: the slave sends its handshake,
// cuts its log and epoch file back to the consistent point, acks it, then
// appends frames, learns a new epoch from a header, and refuses a frame
// of an older epoch.
func TestASSlaveTruncatesToConsistentPoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1 << 20)
		st.fillRecords(t, 0, 3000, 1500, 2000)
		ep := testEpochs(t, 1, 0, 2, 2000) // epoch 2 here is this node's own, unreplicated
		tr := newPipeTransport()
		ln := fakeMaster(t, tr)
		defer ln.Close()
		log, lb := newTestLogger(t)
		s := startSlave(t, st, tr, SlaveConfig{Logger: log, Protocol: ProtocolAutoSwitch, Epochs: ep, BrokerID: 9, AsyncLearner: true})
		defer s.Close()
		c := accept(t, ln)
		defer c.Close()
		if id, fl, al := readSlaveHS(t, c); id != 9 || fl || !al {
			t.Fatalf("handshake %d %v %v", id, fl, al)
		}
		// The master: epoch 1 until 1500, then epoch 3.
		writeMasterHS(t, c, 2500, transport.EpochEntry{Epoch: 1, StartOffset: 0}, transport.EpochEntry{Epoch: 3, StartOffset: 1500})
		if got := readAck(t, c); got != 1500 {
			t.Fatalf("first ack %d, want the consistent point 1500", got)
		}
		if got := st.Bounds().Max; got != 1500 {
			t.Fatalf("log max %d after truncation, want 1500", got)
		}
		if es := ep.Entries(); len(es) != 1 || es[0].Epoch != 1 {
			t.Fatalf("epoch entries %+v, want only epoch 1", es)
		}
		if tr := s.Status().Truncated; tr == nil || tr.From != 3000 || tr.To != 1500 || tr.Bytes != 1500 {
			t.Fatalf("truncation %+v", tr)
		}
		if n := lb.count("truncated the commit log to the consistent point"); n != 1 {
			t.Fatalf("%d truncation lines", n)
		}
		body := pattern(1500, 400)
		c.Write(asFrameBytes(transport.TransferHeader{Offset: 1500, Epoch: 3, EpochStartOffset: 1500, ConfirmOffset: 1700}, body))
		if got := readAck(t, c); got != 1900 {
			t.Fatalf("ack %d, want 1900", got)
		}
		if !bytes.Equal(st.bytesAt(1500, 1900), body) {
			t.Fatal("appended bytes differ")
		}
		if e, ok := ep.Last(); !ok || e.Epoch != 3 || e.StartOffset != 1500 {
			t.Fatalf("last epoch %+v, want 3 at 1500", e)
		}
		if got := s.ConfirmOffset(); got != 1700 {
			t.Fatalf("confirm offset %d, want min(1700, 1900)", got)
		}
		// A frame of an older epoch closes the connection, nothing appended.
		c.Write(asFrameBytes(transport.TransferHeader{Offset: 1900, Epoch: 1, ConfirmOffset: 1900}, pattern(1900, 10)))
		expectClosed(t, c)
		synctest.Wait()
		if got := st.Bounds().Max; got != 1900 {
			t.Fatalf("max %d after an older-epoch frame", got)
		}
		if n := lb.count("frame of an older epoch"); n != 1 {
			t.Fatalf("%d older-epoch lines", n)
		}
	})
}

// TestASSlaveRefuses: no consistent point, and a log with data but no
// epoch history, are refused: one ERROR line, Unhealthy, nothing appended.
func TestASSlaveRefuses(t *testing.T) {
	cases := []struct {
		name  string
		pairs []int64
		want  string
	}{
		{"no consistent point", []int64{5, 0}, "no consistent point with the master"},
		{"data without epochs", nil, "the epoch file is empty"},
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
				s := startSlave(t, st, tr, SlaveConfig{Logger: log, Protocol: ProtocolAutoSwitch, Epochs: testEpochs(t, tc.pairs...)})
				defer s.Close()
				for range 3 {
					c := accept(t, ln)
					readSlaveHS(t, c)
					writeMasterHS(t, c, 5000, transport.EpochEntry{Epoch: 1, StartOffset: 0})
					expectClosed(t, c)
					c.Close()
					synctest.Wait()
				}
				if n := lb.count(tc.want); n != 1 {
					t.Fatalf("%d %q lines over 3 attempts, want 1", n, tc.want)
				}
				if u := s.Status().Unhealthy; !strings.Contains(u, tc.want) {
					t.Fatalf("Unhealthy %q", u)
				}
				if got := st.Bounds().Max; got != 1000 {
					t.Fatalf("max %d", got)
				}
			})
		})
	}
}

// TestCoreSlaveFirstFrameNotSegmentAligned (issue 19 item 3): an empty
// slave whose first frame is not at a multiple of its segment size reports
// a segment error once.
func TestCoreSlaveFirstFrameNotSegmentAligned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1000)
		tr := newPipeTransport()
		ln := fakeMaster(t, tr)
		defer ln.Close()
		log, lb := newTestLogger(t)
		s := startSlave(t, st, tr, SlaveConfig{Logger: log})
		defer s.Close()
		for range 3 {
			c := accept(t, ln)
			readReport(t, c)
			go c.Write(encodeFrame(1536, pattern(1536, 100)))
			expectClosed(t, c)
			synctest.Wait()
		}
		if n := lb.count("not at a segment boundary of the slave"); n != 1 {
			t.Fatalf("%d lines, want 1", n)
		}
		if se := s.Status().SegmentError; !strings.Contains(se, "segment sizes differ") {
			t.Fatalf("SegmentError %q", se)
		}
		if got := st.Bounds().Max; got != 0 {
			t.Fatalf("appended up to %d", got)
		}
	})
}

// TestCoreMasterOutOfRangeErrorRateLimited (issue 19 item 17): a slave
// whose log is longer than the master's reconnects again and again (real
// TCP: every connection comes from 127.0.0.1); the master's ERROR comes
// once per source host, with a hint, and the lag shown never goes negative.
func TestCoreMasterOutOfRangeErrorRateLimited(t *testing.T) {
	st := newMemStore(1 << 20)
	st.fill(t, 0, 1000)
	log, lb := newTestLogger(t)
	m, err := NewMaster(st, tcptransport.New(tcptransport.DefaultOptions()), MasterConfig{ListenAddr: "127.0.0.1:0", Logger: log, HeartbeatInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for range 3 {
		c, err := net.Dial("tcp", m.Addr())
		if err != nil {
			t.Fatal(err)
		}
		rawReport(t, c, 5000)
		if off, body := rawFrame(t, c); off != 5000 || len(body) != 0 {
			t.Fatalf("frame %d+%d, want a heartbeat at 5000", off, len(body))
		}
		for _, si := range m.Status().Slaves {
			if si.LagBytes < 0 {
				t.Fatalf("slave info %+v", si)
			}
		}
		c.Close()
	}
	if n := lb.count("slave offset outside the master's commit log"); n != 1 {
		t.Fatalf("%d ERROR lines over 3 connections, want 1", n)
	}
	if n := lb.count("longer than the master's"); n == 0 {
		t.Fatal("no hint that the slave's log is longer")
	}
}

// TestCoreSlaveResetRightAfterConnect (issue 19 item 9): a master that
// closes every connection at once (an --ha-allow list without this
// address) is named as a possible cause from the second time on.
func TestCoreSlaveResetRightAfterConnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1 << 20)
		tr := newPipeTransport()
		ln := fakeMaster(t, tr)
		defer ln.Close()
		log, lb := newTestLogger(t)
		s := startSlave(t, st, tr, SlaveConfig{Logger: log})
		defer s.Close()
		for range 3 {
			c := accept(t, ln)
			c.Close()
			synctest.Wait()
			time.Sleep(DefaultReconnectDelay)
		}
		synctest.Wait()
		if n := lb.count("it may refuse this address (check its --ha-allow list)"); n < 2 {
			t.Fatalf("%d hints over 3 resets, want at least 2", n)
		}
	})
}

// TestASSlaveKnowsItIsOnlyHeartbeating (issue 19 items 8 and 17): a
// heartbeat whose confirm offset is beyond the slave's max offset means the
// master holds data it will not send: the slave says so (Unhealthy, one
// ERROR line), and clears it when data flows again.
func TestASSlaveKnowsItIsOnlyHeartbeating(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1 << 20)
		tr := newPipeTransport()
		ln := fakeMaster(t, tr)
		defer ln.Close()
		log, lb := newTestLogger(t)
		s := startSlave(t, st, tr, SlaveConfig{Logger: log, Protocol: ProtocolAutoSwitch, Epochs: testEpochs(t)})
		defer s.Close()
		c := accept(t, ln)
		defer c.Close()
		readSlaveHS(t, c)
		writeMasterHS(t, c, 9000, transport.EpochEntry{Epoch: 1, StartOffset: 0})
		readAck(t, c)
		for range 2 {
			c.Write(asFrameBytes(transport.TransferHeader{Offset: 0, Epoch: 1, ConfirmOffset: 9000}, nil))
		}
		synctest.Wait()
		if u := s.Status().Unhealthy; !strings.Contains(u, "heartbeats only") {
			t.Fatalf("Unhealthy %q", u)
		}
		if n := lb.count("sends heartbeats only"); n != 1 {
			t.Fatalf("%d lines", n)
		}
		c.Write(asFrameBytes(transport.TransferHeader{Offset: 0, Epoch: 1, ConfirmOffset: 9000}, pattern(0, 100)))
		readAck(t, c)
		synctest.Wait()
		if u := s.Status().Unhealthy; u != "" {
			t.Fatalf("Unhealthy %q after data", u)
		}
	})
}

// TestASSessionOverMemtransport: a Master and a SlaveNode of the autoswitch
// protocol over memtransport with every write split into pieces of 1..7
// bytes and a reset after 9000 bytes: the slave, whose own epoch 4 diverged
// from the master at 8000, is cut back to the consistent point, learns
// epochs 2 and 3 from the frame headers, survives the reset and ends
// byte-identical with the master's epoch list.
func TestASSessionOverMemtransport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memtransport.NewNetwork(memtransport.Config{Seed: 7})
		nw.Link("slave", "mem:master").SetFaults(memtransport.Faults{SplitWrites: 7, ResetAfterBytes: 9000})
		mst := newMemStore(4096)
		mst.fillRecords(t, 0, 20000, 5000, 8000, 12000)
		mep := testEpochs(t, 1, 0, 2, 5000, 3, 12000)
		mlog, _ := newTestLogger(t)
		m, err := NewMaster(mst, nw.Transport("master"), MasterConfig{ListenAddr: "mem:master", Protocol: ProtocolAutoSwitch, Epochs: mep, BrokerID: 1, Logger: mlog.Named("master")})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		sst := newMemStore(4096)
		sst.fillRecords(t, 0, 8000, 5000) // the master's bytes below 8000
		sst.topic = "OwnEpoch4"           // its own, unreplicated epoch from 8000
		sst.fillRecords(t, 8000, 9000)
		sep := testEpochs(t, 1, 0, 2, 5000, 4, 8000)
		slog, lb := newTestLogger(t)
		s, err := NewSlave(sst, nw.Transport("slave"), SlaveConfig{MasterAddr: "mem:master", Protocol: ProtocolAutoSwitch, Epochs: sep, BrokerID: 2, Logger: slog.Named("slave")})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		// Fake time: an hour is hundreds of reconnects; a slave that never
		// gets there must fail the test, not spin it forever.
		for deadline := time.Now().Add(time.Hour); sst.Bounds().Max != 20000; time.Sleep(time.Second) {
			if time.Now().After(deadline) {
				t.Fatalf("slave max offset %d after an hour of fake time, want 20000; status %+v", sst.Bounds().Max, s.Status())
			}
		}
		if !bytes.Equal(sst.bytesAt(0, 20000), mst.bytesAt(0, 20000)) {
			t.Fatal("slave bytes differ from the master's")
		}
		if got, want := sep.Entries(), mep.Entries(); !slices.Equal(got, want) {
			t.Fatalf("slave epochs %+v, want %+v", got, want)
		}
		if n := lb.count("truncated the commit log to the consistent point"); n != 1 {
			t.Fatalf("%d truncations", n)
		}
		if tr := s.Status().Truncated; tr == nil || tr.From != 9000 || tr.To != 8000 {
			t.Fatalf("truncation %+v", tr)
		}
		if s.Status().Reconnects == 0 {
			t.Fatal("the reset did not happen")
		}
	})
}

// TestASSlaveEmptyLogDropsEpochs: epoch entries over an empty log cover
// nothing: the slave starts as a new replica instead of refusing.
func TestASSlaveEmptyLogDropsEpochs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1 << 20)
		ep := testEpochs(t, 5, 0)
		tr := newPipeTransport()
		ln := fakeMaster(t, tr)
		defer ln.Close()
		s := startSlave(t, st, tr, SlaveConfig{Protocol: ProtocolAutoSwitch, Epochs: ep})
		defer s.Close()
		c := accept(t, ln)
		defer c.Close()
		readSlaveHS(t, c)
		writeMasterHS(t, c, 100, transport.EpochEntry{Epoch: 6, StartOffset: 0})
		if got := readAck(t, c); got != 0 {
			t.Fatalf("ack %d", got)
		}
		if ep.Len() != 0 || s.Status().Unhealthy != "" {
			t.Fatalf("entries %d, unhealthy %q", ep.Len(), s.Status().Unhealthy)
		}
	})
}
