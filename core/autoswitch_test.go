package core

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/replicatorhq/replicator/core/epoch"
	"github.com/replicatorhq/replicator/transport"
)

// Byte-level tests of the autoswitch protocol on both sides, over
// in-memory connections with fake time (testing/synctest).

// testEpochs opens an epoch file in a temporary directory holding entries
// given as epoch, start pairs.
func testEpochs(t *testing.T, pairs ...int64) *epoch.File {
	t.Helper()
	ep, err := epoch.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := ep.Append(int32(pairs[i]), pairs[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	return ep
}

// slaveHS writes a 16-byte slave handshake, built by hand.
func slaveHS(t *testing.T, c net.Conn, id int64, fromLast, learner bool) {
	t.Helper()
	b := binary.BigEndian.AppendUint32(nil, 1)
	b = binary.BigEndian.AppendUint16(b, boolU16(fromLast))
	b = binary.BigEndian.AppendUint16(b, boolU16(learner))
	b = binary.BigEndian.AppendUint64(b, uint64(id))
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

func boolU16(v bool) uint16 {
	if v {
		return 1
	}
	return 0
}

// ack12 writes a 12-byte ack [2][offset], built by hand.
func ack12(t *testing.T, c net.Conn, off int64) {
	t.Helper()
	b := binary.BigEndian.AppendUint32(nil, 2)
	b = binary.BigEndian.AppendUint64(b, uint64(off))
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

// readMasterHS reads the master handshake byte by byte.
func readMasterHS(t *testing.T, c net.Conn) (maxOff int64, last int32, es [][2]int64) {
	t.Helper()
	var h [20]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		t.Fatalf("read master handshake: %v", err)
	}
	if st := binary.BigEndian.Uint32(h[:]); st != 1 {
		t.Fatalf("master handshake state %d", st)
	}
	n := int(binary.BigEndian.Uint32(h[4:]))
	if n%12 != 0 || n > 12000 {
		t.Fatalf("handshake body %d", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 12 {
		es = append(es, [2]int64{int64(int32(binary.BigEndian.Uint32(body[i:]))), int64(binary.BigEndian.Uint64(body[i+4:]))})
	}
	return int64(binary.BigEndian.Uint64(h[8:])), int32(binary.BigEndian.Uint32(h[16:])), es
}

// asFrame reads one 36-byte-header transfer frame.
func readASFrame(t *testing.T, c net.Conn) (transport.TransferHeader, []byte) {
	t.Helper()
	var h [36]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		t.Fatalf("read transfer header: %v", err)
	}
	if st := binary.BigEndian.Uint32(h[:]); st != 2 {
		t.Fatalf("transfer state %d", st)
	}
	th := transport.TransferHeader{
		Size: int32(binary.BigEndian.Uint32(h[4:])), Offset: int64(binary.BigEndian.Uint64(h[8:])),
		Epoch: int32(binary.BigEndian.Uint32(h[16:])), EpochStartOffset: int64(binary.BigEndian.Uint64(h[20:])),
		ConfirmOffset: int64(binary.BigEndian.Uint64(h[28:])),
	}
	body := make([]byte, th.Size)
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatal(err)
	}
	return th, body
}

func asMasterCfg(ep *epoch.File) MasterConfig {
	return MasterConfig{Protocol: ProtocolAutoSwitch, Epochs: ep, BrokerID: 1}
}

// TestASMasterHandshakeStartAndEpochBoundedFrames: the master answers the
// handshake with its max offset, last epoch and entries; an ack of 0 starts
// at the min offset (or the last segment with isSyncFromLastFile); frames
// never cross an epoch end nor a segment end and carry the epoch fields.
func TestASMasterHandshakeStartAndEpochBoundedFrames(t *testing.T) {
	for _, fromLast := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			st := newMemStore(1000)
			st.fill(t, 0, 3500)
			ep := testEpochs(t, 1, 0, 3, 1500, 4, 2200)
			tr := newPipeTransport()
			m := startMaster(t, st, tr, asMasterCfg(ep))
			defer m.Close()
			c := dial(t, tr)
			defer c.Close()
			slaveHS(t, c, 7, fromLast, false)
			maxOff, last, es := readMasterHS(t, c)
			if maxOff != 3500 || last != 4 || !slices.Equal(es, [][2]int64{{1, 0}, {3, 1500}, {4, 2200}}) {
				t.Fatalf("handshake %d %d %v", maxOff, last, es)
			}
			synctest.Wait()
			if s := m.Status().Slaves; len(s) != 1 || s[0].HAState != "HANDSHAKE" || s[0].BrokerID != 7 {
				t.Fatalf("status before the first ack %+v", s)
			}
			ack12(t, c, 0)
			next := int64(0)
			if fromLast {
				next = 3000
			}
			bounds := []int64{1000, 1500, 2000, 2200, 3000}
			for next < 3500 {
				th, body := readASFrame(t, c)
				if th.Offset != next || th.Size == 0 {
					t.Fatalf("frame at %d size %d, want offset %d", th.Offset, th.Size, next)
				}
				e, _ := ep.FindByOffset(th.Offset)
				if th.Epoch != e.Epoch || th.EpochStartOffset != e.StartOffset {
					t.Fatalf("frame at %d: epoch %d/%d, want %d/%d", th.Offset, th.Epoch, th.EpochStartOffset, e.Epoch, e.StartOffset)
				}
				for _, bnd := range bounds {
					if th.Offset < bnd && th.End() > bnd {
						t.Fatalf("frame [%d, %d) crosses %d", th.Offset, th.End(), bnd)
					}
				}
				if th.ConfirmOffset != 3500 {
					t.Fatalf("confirm offset %d, want the max offset 3500 (a set of one, #7656)", th.ConfirmOffset)
				}
				if !bytes.Equal(body, pattern(th.Offset, int(th.Size))) {
					t.Fatalf("body at %d differs", th.Offset)
				}
				next = th.End()
			}
			ack12(t, c, 3500)
			// A heartbeat after HeartbeatInterval: size 0 at next, last epoch.
			th, _ := readASFrame(t, c)
			if th.Size != 0 || th.Offset != 3500 || th.Epoch != 4 {
				t.Fatalf("heartbeat %+v", th)
			}
		})
	}
}

// TestASMasterStateMismatch: an ack before the handshake, a classic 8-byte
// report and a handshake after the transfer started each close the
// connection with one log line.
func TestASMasterStateMismatch(t *testing.T) {
	cases := []struct {
		name, line string
		send       func(t *testing.T, c net.Conn)
	}{
		{"ack before handshake", "state mismatch: TRANSFER ack before the HANDSHAKE", func(t *testing.T, c net.Conn) { ack12(t, c, 0) }},
		{"classic report", "frame state is neither HANDSHAKE nor TRANSFER", func(t *testing.T, c net.Conn) { rawReport(t, c, 100) }},
		{"handshake after transfer", "state mismatch: HANDSHAKE after the transfer started", func(t *testing.T, c net.Conn) {
			slaveHS(t, c, 7, false, false)
			ack12(t, c, 500)
			slaveHS(t, c, 7, false, false)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newMemStore(1000)
				st.fill(t, 0, 500)
				tr := newPipeTransport()
				log, lb := newTestLogger(t)
				cfg := asMasterCfg(testEpochs(t, 1, 0))
				cfg.Logger = log
				m := startMaster(t, st, tr, cfg)
				defer m.Close()
				c := dial(t, tr)
				defer c.Close()
				go tc.send(t, c)
				io.Copy(io.Discard, c)
				synctest.Wait()
				if n := lb.count(tc.line); n != 1 {
					t.Fatalf("%d %q lines, want 1", n, tc.line)
				}
			})
		})
	}
}

// TestASMasterTooManyEpochs: more than 1000 entries cannot be sent: the
// connection closes with a clear line instead of an overflowing frame.
func TestASMasterTooManyEpochs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1 << 20)
		st.fill(t, 0, 2000)
		var pairs []int64
		for i := range int64(1001) {
			pairs = append(pairs, i+1, i)
		}
		tr := newPipeTransport()
		log, lb := newTestLogger(t)
		cfg := asMasterCfg(testEpochs(t, pairs...))
		cfg.Logger = log
		m := startMaster(t, st, tr, cfg)
		defer m.Close()
		c := dial(t, tr)
		defer c.Close()
		slaveHS(t, c, 7, false, false)
		if got := expectClosed(t, c); len(got) != 0 {
			t.Fatalf("master sent %d bytes", len(got))
		}
		synctest.Wait()
		if n := lb.count("more entries than a handshake carries"); n != 1 {
			t.Fatalf("%d lines, want 1", n)
		}
	})
}

// TestASMasterDropsWithoutEpoch (RocketMQ #9689): data pending at an
// offset no epoch covers drops the connection, never a stale header.
func TestASMasterDropsWithoutEpoch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1000)
		st.fill(t, 0, 3000)
		tr := newPipeTransport()
		log, lb := newTestLogger(t)
		cfg := asMasterCfg(testEpochs(t, 2, 1000))
		cfg.Logger = log
		m := startMaster(t, st, tr, cfg)
		defer m.Close()
		c := dial(t, tr)
		defer c.Close()
		slaveHS(t, c, 7, false, false)
		readMasterHS(t, c)
		ack12(t, c, 500)
		if got := expectClosed(t, c); len(got) != 0 {
			t.Fatalf("master sent %d bytes of transfer frames", len(got))
		}
		synctest.Wait()
		if n := lb.count("no epoch entry covers the data to send"); n != 1 {
			t.Fatalf("%d lines, want 1", n)
		}
	})
}

// TestASMasterDuplicateBrokerID: a new connection with a live one's broker
// id replaces it.
func TestASMasterDuplicateBrokerID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1000)
		st.fill(t, 0, 500)
		tr := newPipeTransport()
		log, lb := newTestLogger(t)
		cfg := asMasterCfg(testEpochs(t, 1, 0))
		cfg.Logger = log
		m := startMaster(t, st, tr, cfg)
		defer m.Close()
		old := dial(t, tr)
		defer old.Close()
		slaveHS(t, old, 7, false, false)
		readMasterHS(t, old)
		ack12(t, old, 500)
		synctest.Wait()
		c := dial(t, tr)
		defer c.Close()
		slaveHS(t, c, 7, false, false)
		readMasterHS(t, c)
		io.Copy(io.Discard, old)
		synctest.Wait()
		if n := lb.count("slave connection replaced by a newer one with the same broker id"); n != 1 {
			t.Fatalf("%d replaced lines, want 1", n)
		}
		if s := m.Status().Slaves; len(s) != 1 || s[0].Addr != c.LocalAddr().String() {
			t.Fatalf("slaves %+v", s)
		}
	})
}

// chanConfirmer is a SyncStateSetConfirmer answered by the test.
type chanConfirmer struct {
	got    chan []int64
	answer chan error
}

func (c *chanConfirmer) Propose(ctx context.Context, epoch int32, set []int64) ([]int64, error) {
	c.got <- set
	select {
	case err := <-c.answer:
		return set, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestASSyncStateSetExpandInFlightShrink: a slave that catches up is
// proposed; while the proposal is in flight a sync put waits for it (the
// union of both sets, #5663); confirmed, the confirm offset follows its
// acks; it is dropped after MaxTimeSlaveNotCatchup without catching up.
func TestASSyncStateSetExpandInFlightShrink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1 << 20)
		st.fillRecords(t, 0, 500)
		tr := newPipeTransport()
		conf := &chanConfirmer{got: make(chan []int64, 4), answer: make(chan error)}
		cfg := asMasterCfg(testEpochs(t, 1, 0))
		cfg.Role, cfg.SyncStateSetConfirmer = SyncMaster, conf
		m := startMaster(t, st, tr, cfg)
		defer m.Close()
		c := dial(t, tr)
		defer c.Close()
		go io.Copy(io.Discard, c)
		slaveHS(t, c, 7, false, false)
		// A put before the slave is in the set: PUT_OK at once (set of one).
		if res, err := m.Put(context.Background(), testMsg(10)); err != nil || res.Status != PutOK {
			t.Fatalf("put with a set of one: %v %v", res.Status, err)
		}
		max0 := st.Bounds().Max
		ack12(t, c, max0)
		if got := <-conf.got; !slices.Equal(got, []int64{1, 7}) {
			t.Fatalf("proposed %v", got)
		}
		if s := m.Status(); !slices.Equal(s.Proposed, []int64{1, 7}) || !slices.Equal(s.SyncStateSet, []int64{1}) {
			t.Fatalf("status %v / %v", s.SyncStateSet, s.Proposed)
		}
		// In flight: a sync put waits for member 7.
		done := make(chan PutResult, 1)
		go func() {
			res, _ := m.Put(context.Background(), testMsg(10))
			done <- res
		}()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("sync put did not wait for the proposed member")
		default:
		}
		ack12(t, c, st.Bounds().Max)
		if res := <-done; res.Status != PutOK {
			t.Fatalf("status %v", res.Status)
		}
		conf.answer <- nil
		synctest.Wait()
		if s := m.Status(); !slices.Equal(s.SyncStateSet, []int64{1, 7}) || s.Proposed != nil || s.ConfirmOffset != st.Bounds().Max {
			t.Fatalf("after confirmation: %v / %v, confirm %d", s.SyncStateSet, s.Proposed, s.ConfirmOffset)
		}
		if _, err := m.Put(context.Background(), testMsg(10)); err != nil {
			t.Fatal(err)
		}
		// The put timed out (no ack): the confirm offset stays at the ack.
		if got, want := m.ConfirmOffset(), st.Bounds().Max; got >= want {
			t.Fatalf("confirm offset %d, want below the max %d", got, want)
		}
		// Stop acking: after 15 s (checked every 5 s) the member is dropped.
		if got := <-conf.got; !slices.Equal(got, []int64{1}) {
			t.Fatalf("shrink proposed %v", got)
		}
		conf.answer <- nil
		synctest.Wait()
		if s := m.Status(); !slices.Equal(s.SyncStateSet, []int64{1}) {
			t.Fatalf("after shrink %v", s.SyncStateSet)
		}
	})
}

// TestASConfirmOffsetRules: computeConfirmOffset's cases.
func TestASConfirmOffsetRules(t *testing.T) {
	st := newMemStore(1 << 20)
	st.fill(t, 0, 1000)
	m, err := NewMaster(st, newPipeTransport(), MasterConfig{ListenAddr: "x", Protocol: ProtocolAutoSwitch, Epochs: testEpochs(t, 1, 0), BrokerID: 1})
	if err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if got := m.reportedConfirm(1000); got != 1000 {
		t.Fatalf("set of one: %d, want the max offset (#7656)", got)
	}
	a := &slaveConn{m: m, brokerID: 2, ack: 600, hsRead: true, counted: true}
	b := &slaveConn{m: m, brokerID: 3, ack: 0, hsRead: true}
	m.byID[2], m.byID[3] = a, b
	m.sss.local = map[int64]struct{}{1: {}, 2: {}, 3: {}}
	m.computeConfirmLocked()
	if got := m.reportedConfirm(1000); got != 600 {
		t.Fatalf("min ack, acks of 0 skipped (#6728): %d, want 600", got)
	}
	delete(m.byID, 3)
	a.ack = 900
	m.computeConfirmLocked()
	if got := m.reportedConfirm(1000); got != 600 {
		t.Fatalf("a member without connection keeps the stored value (#6662): %d, want 600", got)
	}
	m.byID[3] = b
	b.ack = 800
	m.computeConfirmLocked()
	if got := m.reportedConfirm(1000); got != 800 {
		t.Fatalf("%d, want 800", got)
	}
	m.sss.remote = map[int64]struct{}{1: {}, 2: {}, 3: {}, 4: {}}
	if q := m.memberQuorumLocked(); q != -1 {
		t.Fatalf("quorum over local ∪ remote with member 4 unconnected: %d, want -1", q)
	}
}

// TestASFence: Fence fails the waiting sync puts and refuses new ones with
// ErrFenced at once.
func TestASFence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1 << 20)
		tr := newPipeTransport()
		cfg := asMasterCfg(testEpochs(t, 1, 0))
		cfg.Role = SyncMaster
		m := startMaster(t, st, tr, cfg)
		defer m.Close()
		c := dial(t, tr)
		defer c.Close()
		go io.Copy(io.Discard, c)
		slaveHS(t, c, 7, false, false)
		ack12(t, c, 0)
		synctest.Wait()
		if s := m.Status().SyncStateSet; !slices.Equal(s, []int64{1, 7}) {
			t.Fatalf("set %v", s)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := m.Put(context.Background(), testMsg(10))
			errc <- err
		}()
		synctest.Wait()
		start := time.Now()
		m.Fence(errors.New("demoted"))
		if err := <-errc; !errors.Is(err, ErrFenced) || time.Since(start) != 0 {
			t.Fatalf("waiting put: %v after %v", err, time.Since(start))
		}
		if _, err := m.Put(context.Background(), testMsg(10)); !errors.Is(err, ErrFenced) {
			t.Fatalf("new put: %v", err)
		}
		if s := m.Status(); s.Fenced == "" {
			t.Fatal("status does not say fenced")
		}
		// Frozen: the member leaving (it is being promoted) does not shrink
		// the set, which would release waiting puts without it.
		c.Close()
		synctest.Wait()
		if s := m.Status().SyncStateSet; !slices.Equal(s, []int64{1, 7}) {
			t.Fatalf("a fenced master's set changed to %v", s)
		}
	})
}

// TestASRetentionTruncatesEpochPrefix: when the store's min offset moves
// (retention deleted segments), the periodic check drops the epoch entries
// that end at or below it.
func TestASRetentionTruncatesEpochPrefix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1000)
		st.fill(t, 0, 5000)
		ep := testEpochs(t, 1, 0, 2, 1500, 3, 2500)
		m := startMaster(t, st, newPipeTransport(), asMasterCfg(ep))
		defer m.Close()
		if min, err := st.DeleteSegmentsBefore(3000); err != nil || min != 3000 { // retention: the first three segments go
			t.Fatalf("retention: min %d, %v", min, err)
		}
		time.Sleep(DefaultCheckSyncStateSetPeriod + time.Second)
		synctest.Wait()
		if es := ep.Entries(); len(es) != 1 || es[0].Epoch != 3 {
			t.Fatalf("entries %+v, want only epoch 3", es)
		}
	})
}

// TestASSyncAcksAndLearners: with SyncAcks > 0 a sync put waits for that
// many handshaken, non-learner slaves: a connection without a handshake
// and an async learner do not count (SLAVE_NOT_AVAILABLE), and a learner
// never joins the in-sync set.
func TestASSyncAcksAndLearners(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1 << 20)
		tr := newPipeTransport()
		cfg := asMasterCfg(testEpochs(t, 1, 0))
		cfg.Role, cfg.SyncAcks = SyncMaster, 1
		m := startMaster(t, st, tr, cfg)
		defer m.Close()
		raw := dial(t, tr) // connected, no handshake
		defer raw.Close()
		learner := dial(t, tr)
		defer learner.Close()
		go io.Copy(io.Discard, learner)
		slaveHS(t, learner, 8, false, true)
		ack12(t, learner, 0)
		synctest.Wait()
		if res, err := m.Put(context.Background(), testMsg(10)); err != nil || res.Status != SlaveNotAvailable {
			t.Fatalf("put with only a learner and an unshaken connection: %v %v", res.Status, err)
		}
		ack12(t, learner, st.Bounds().Max)
		synctest.Wait()
		if s := m.Status(); !slices.Equal(s.SyncStateSet, []int64{1}) {
			t.Fatalf("a learner joined the set: %v", s.SyncStateSet)
		}
		c := dial(t, tr)
		defer c.Close()
		go io.Copy(io.Discard, c)
		slaveHS(t, c, 7, false, false)
		ack12(t, c, st.Bounds().Max)
		synctest.Wait()
		done := make(chan PutResult, 1)
		go func() {
			res, _ := m.Put(context.Background(), testMsg(10))
			done <- res
		}()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("the put did not wait for slave 7")
		default:
		}
		ack12(t, learner, st.Bounds().Max) // a learner's ack does not release it
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("a learner's ack released the put")
		default:
		}
		ack12(t, c, st.Bounds().Max)
		if res := <-done; res.Status != PutOK {
			t.Fatalf("status %v", res.Status)
		}
	})
}
