package core

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// ackingSlave follows an autoswitch master over c like a slave does for
// the in-sync set: it reads every frame and, while acking is on, acks
// the end of what it holds after each one (heartbeats included, which
// the master sends every HeartbeatInterval when idle), and calls acked
// after each ack. It returns when c closes.
func ackingSlave(c net.Conn, acking func() bool, acked func()) error {
	var h [36]byte
	held := int64(-1)
	for {
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return err
		}
		if st := binary.BigEndian.Uint32(h[:]); st != 2 {
			return errors.New("not a transfer frame")
		}
		size := int64(int32(binary.BigEndian.Uint32(h[4:])))
		off := int64(binary.BigEndian.Uint64(h[8:]))
		if _, err := io.CopyN(io.Discard, c, size); err != nil {
			return err
		}
		if held >= 0 && off != held {
			return errors.New("frame offset is not the held max")
		}
		held = off + size
		if acking() {
			b := binary.BigEndian.AppendUint32(nil, 2)
			if _, err := c.Write(binary.BigEndian.AppendUint64(b, uint64(held))); err != nil {
				return err
			}
			acked()
		}
	}
}

// TestASSilentSlaveLeavesInSyncSet: the caught-up clock moves only on
// acks. A member whose acks stop while its connection stays up (a silent
// partition: the master's writes still leave its socket, and the writer
// has nothing left to send) leaves the in-sync set once
// MaxTimeSlaveNotCatchup passed since its last ack, at the first check
// after that (CheckSyncStateSetPeriod), never before; a new connection of
// the same broker id (a handshake, no ack) does not restart its clock. A
// member that keeps acking stays, with puts flowing and idle. The
// connection's idle close (HousekeepingInterval) is set far beyond the
// test, so that only the catch-up rule can drop the member.
func TestASSilentSlaveLeavesInSyncSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1 << 20)
		st.fillRecords(t, 0, 500)
		tr := newPipeTransport()
		cfg := asMasterCfg(testEpochs(t, 1, 0))
		cfg.Role, cfg.SlaveTimeout, cfg.HousekeepingInterval = SyncMaster, time.Second, time.Hour
		logger, logs := newTestLogger(t)
		cfg.Logger = logger
		m := startMaster(t, st, tr, cfg)
		defer m.Close()

		var (
			silent   atomic.Bool
			lastAck8 atomic.Int64 // Unix nanoseconds
		)
		follow := func(id int64, acking func() bool, acked func()) net.Conn {
			c := dial(t, tr)
			slaveHS(t, c, id, false, false)
			readMasterHS(t, c)
			ack12(t, c, 0)
			go ackingSlave(c, acking, acked) //nolint:errcheck // ends when c closes
			return c
		}
		c7 := follow(7, func() bool { return true }, func() {})
		defer c7.Close()
		c8 := follow(8, func() bool { return !silent.Load() }, func() { lastAck8.Store(time.Now().UnixNano()) })
		defer c8.Close()
		synctest.Wait()
		if s := m.Status().SyncStateSet; !slices.Equal(s, []int64{1, 7, 8}) {
			t.Fatalf("in-sync set %v, want [1 7 8]", s)
		}

		// Sync puts every 1.5 s: each waits for both members (at most
		// SlaveTimeout once 8 is silent).
		stop := make(chan struct{})
		putsDone := make(chan struct{})
		defer func() {
			select {
			case <-stop:
			default:
				close(stop)
			}
			<-putsDone
		}()
		go func() {
			defer close(putsDone)
			for {
				select {
				case <-stop:
					return
				case <-time.After(1500 * time.Millisecond):
				}
				m.Put(context.Background(), testMsg(10))
			}
		}()
		time.Sleep(4 * time.Second) // puts flowing, both acking
		synctest.Wait()
		if s := m.Status().SyncStateSet; !slices.Equal(s, []int64{1, 7, 8}) {
			t.Fatalf("in-sync set %v with both acking, want [1 7 8]", s)
		}

		// 8 goes silent: its last ack (of the max offset: no put is in
		// flight between puts) is the clock's last move.
		silent.Store(true)
		synctest.Wait()
		t0 := time.Unix(0, lastAck8.Load())
		replaced := false
		for {
			time.Sleep(250 * time.Millisecond)
			synctest.Wait()
			el := time.Since(t0)
			if !replaced && el >= 8*time.Second {
				// A new connection of 8 (handshake, no ack) replaces
				// the old one: the clock stays where the acks left it.
				old := c8
				c8 = dial(t, tr)
				slaveHS(t, c8, 8, false, false)
				go io.Copy(io.Discard, c8) //nolint:errcheck // ends when c8 closes
				synctest.Wait()
				old.Close()
				replaced = true
			}
			s := m.Status().SyncStateSet
			if !slices.Contains(s, 7) {
				t.Fatalf("the acking member 7 left the set after %v: %v", el, s)
			}
			if !slices.Contains(s, 8) {
				if el <= DefaultMaxTimeSlaveNotCatchup {
					t.Fatalf("8 left the set %v after its last ack, before MaxTimeSlaveNotCatchup", el)
				}
				t.Logf("8 left the in-sync set %v after its last ack", el)
				break
			}
			if limit := DefaultMaxTimeSlaveNotCatchup + DefaultCheckSyncStateSetPeriod; el > limit {
				t.Fatalf("8 still in the in-sync set %v after its last ack (limit %v)", el, limit)
			}
		}
		if n := logs.count("has not acknowledged the master's max offset for too long"); n != 1 {
			t.Fatalf("%d drop lines, want 1", n)
		}

		// 7 keeps acking through idle time (heartbeats only) and puts.
		close(stop)
		time.Sleep(3 * DefaultMaxTimeSlaveNotCatchup)
		synctest.Wait()
		if s := m.Status().SyncStateSet; !slices.Equal(s, []int64{1, 7}) {
			t.Fatalf("in-sync set %v after idle time, want [1 7]", s)
		}
		if res, err := m.Put(context.Background(), testMsg(10)); err != nil || res.Status != PutOK {
			t.Fatalf("put with 7 in sync: %v %v", res.Status, err)
		}
	})
}

// TestASTransfersCaughtUpAt: the writer's transfer records answer "as of
// when does an ack hold everything the master had": the newest transfer
// whose max offset the ack reaches; transfers within one grain share a
// record (its time, the grain's newest max offset); nothing when the ack
// reaches no remembered transfer.
func TestASTransfersCaughtUpAt(t *testing.T) {
	var x transfers
	t0 := time.Unix(1000, 0)
	if _, ok := x.caughtUpAt(1 << 40); ok {
		t.Fatal("an empty record answered")
	}
	x.add(100, t0)
	x.add(150, t0.Add(transferGrain/2)) // same grain: max 150 at t0
	x.add(300, t0.Add(transferGrain))
	x.add(400, t0.Add(3*transferGrain))
	for _, c := range []struct {
		v    int64
		want time.Time
		ok   bool
	}{
		{99, time.Time{}, false},
		{100, time.Time{}, false}, // the grain's max is 150
		{150, t0, true},
		{299, t0, true},
		{300, t0.Add(transferGrain), true},
		{1000, t0.Add(3 * transferGrain), true},
	} {
		if got, ok := x.caughtUpAt(c.v); ok != c.ok || !got.Equal(c.want) {
			t.Errorf("caughtUpAt(%d) = %v %v, want %v %v", c.v, got, ok, c.want, c.ok)
		}
	}
	// The ring forgets the oldest records.
	for i := range transferRecs {
		x.add(int64(1000+i), t0.Add(time.Duration(10+i)*transferGrain))
	}
	if _, ok := x.caughtUpAt(500); ok {
		t.Fatal("an ack below every remembered transfer answered")
	}
	if got, ok := x.caughtUpAt(1000); !ok || !got.Equal(t0.Add(10*transferGrain)) {
		t.Fatalf("the oldest remembered transfer: %v %v", got, ok)
	}
}

// TestASIdleMemberStaysInSyncSet: a real slave of an idle master stays in
// the in-sync set although MaxTimeSlaveNotCatchup (3 s) is below its
// ReportInterval (5 s): the master heartbeats at a third of it and the
// slave acks every heartbeat, so the acks that alone keep it there keep
// coming.
func TestASIdleMemberStaysInSyncSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore(1 << 20)
		st.fillRecords(t, 0, 500)
		tr := newPipeTransport()
		cfg := asMasterCfg(testEpochs(t, 1, 0))
		cfg.Role, cfg.MaxTimeSlaveNotCatchup, cfg.CheckSyncStateSetPeriod = SyncMaster, 3*time.Second, time.Second
		logger, logs := newTestLogger(t)
		cfg.Logger = logger
		m := startMaster(t, st, tr, cfg)
		defer m.Close()
		s, err := NewSlave(newMemStore(1<<20), tr, SlaveConfig{MasterAddr: testMasterAddr, Protocol: ProtocolAutoSwitch,
			Epochs: testEpochs(t), BrokerID: 2, Logger: logger.Named("s")})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		time.Sleep(time.Second)
		synctest.Wait()
		if set := m.Status().SyncStateSet; !slices.Equal(set, []int64{1, 2}) {
			t.Fatalf("in-sync set %v, want [1 2]", set)
		}
		time.Sleep(time.Minute) // idle
		synctest.Wait()
		if n := logs.count("in-sync set changed"); n != 1 {
			t.Fatalf("the set changed %d times over an idle minute, want once (the join)", n)
		}
		if res, err := m.Put(context.Background(), testMsg(10)); err != nil || res.Status != PutOK {
			t.Fatalf("put after an idle minute: %v %v", res.Status, err)
		}
	})
}
