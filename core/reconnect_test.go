package core

import (
	"context"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// dialRecorder records the (fake) time of every dial.
type dialRecorder struct {
	*pipeTransport
	mu sync.Mutex
	at []time.Time
}

func (d *dialRecorder) Dial(ctx context.Context, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.at = append(d.at, time.Now())
	d.mu.Unlock()
	return d.pipeTransport.Dial(ctx, addr)
}

// gaps returns the waits between the dials from the i-th on.
func (d *dialRecorder) gaps(i int) []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	var g []time.Duration
	for j := i + 1; j < len(d.at); j++ {
		g = append(g, d.at[j].Sub(d.at[j-1]))
	}
	return g
}

func (d *dialRecorder) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.at)
}

func durationsEqual(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCoreSlaveRetriesQuicklyUntilUp: a started slave whose master is not
// listening yet retries after 50 ms, doubling up to ReconnectDelay; once a
// connection was up and dropped, it retries every ReconnectDelay.
func TestCoreSlaveRetriesQuicklyUntilUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &dialRecorder{pipeTransport: newPipeTransport()}
		logger, logs := newTestLogger(t)
		s, err := NewSlave(newMemStore(1<<20), tr, SlaveConfig{MasterAddr: testMasterAddr, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ms := time.Millisecond
		time.Sleep(7 * time.Second) // dials at 0, 50 ms, 150 ms, 350 ms, 750 ms, 1.55 s, 3.15 s, 6.35 s
		synctest.Wait()
		if got, want := tr.gaps(0), []time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms}; !durationsEqual(got, want) {
			t.Fatalf("waits between refused dials %v, want %v", got, want)
		}
		if n := logs.count("retry_in=50ms"); n != 1 {
			t.Fatalf("%d lines say retry_in=50ms, want 1", n)
		}

		// The master starts; the next dial (capped at ReconnectDelay)
		// connects.
		mst := newMemStore(1 << 20)
		mst.fillRecords(t, 0, 500)
		m := startMaster(t, mst, tr.pipeTransport, MasterConfig{})
		defer m.Close()
		up := tr.count()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := tr.gaps(up - 1); !durationsEqual(got, []time.Duration{5 * time.Second}) {
			t.Fatalf("waits after the master started %v, want [5s]", got)
		}
		if st := s.Status(); !st.Connected || st.HAState != "TRANSFER" {
			t.Fatalf("slave not connected: %+v", st)
		}

		// The connection drops (the master goes): from now on every
		// retry waits ReconnectDelay.
		m.Close()
		synctest.Wait()
		dropped, n := time.Now(), tr.count()
		time.Sleep(11 * time.Second)
		synctest.Wait()
		if got := tr.gaps(n - 1); len(got) != 2 || got[1] != 5*time.Second {
			t.Fatalf("waits after the connection dropped %v, want [.. 5s]", got)
		}
		tr.mu.Lock()
		first := tr.at[n].Sub(dropped)
		tr.mu.Unlock()
		if first != 5*time.Second {
			t.Fatalf("first retry %v after the drop, want 5s", first)
		}
	})
}

// TestReplicaBecomeSlaveConnectsQuickly: after a failover a slave is told
// to follow a new master whose HA listener opens a moment later (it is
// named before it serves): the slave's first dial is refused, and its
// next ones follow within 50, 100 ms..., not after ReconnectDelay.
func TestReplicaBecomeSlaveConnectsQuickly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newPipeTransport()
		logger, _ := newTestLogger(t)
		newRep := func(id int64, addr string) *Replica {
			st := newMemStore(1 << 20)
			r, err := NewReplica(ReplicaConfig{Store: st, Transport: tr, Epochs: testEpochs(t), BrokerID: id,
				Master: MasterConfig{ListenAddr: addr}, Logger: logger.With("broker_id", id)})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		a, b, c := newRep(1, "a:1"), newRep(2, "b:1"), newRep(3, "c:1")
		defer a.Close()
		defer b.Close()
		defer c.Close()
		if _, err := a.BecomeMaster(1); err != nil {
			t.Fatal(err)
		}
		connected := follow(t, b, "a:1")
		if err := c.BecomeSlave("a:1"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()

		// a dies; the group names c; b follows c before c listens.
		a.Close()
		t0 := time.Now()
		if err := b.BecomeSlave("c:1"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(120 * time.Millisecond)
		if _, err := c.BecomeMaster(2); err != nil {
			t.Fatal(err)
		}
		<-connected
		if d := time.Since(t0); d > 200*time.Millisecond {
			t.Fatalf("b reached c %v after the role change, want within the fast retries (150 ms)", d)
		}
	})
}

// TestReplicaBecomeSlaveSameAddressRearms: a slave whose master went away
// (so its retries wait ReconnectDelay) is told to follow a master at the
// same address again (another node behind the address, or the same one
// elected again): it dials at once instead of at the end of its wait.
func TestReplicaBecomeSlaveSameAddressRearms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newPipeTransport()
		newRep := func(id int64) *Replica {
			return newTestReplica(t, newMemStore(1<<20), tr, testEpochs(t), id, "a:1", nil)
		}
		a, b := newRep(1), newRep(2)
		defer b.Close()
		if _, err := a.BecomeMaster(1); err != nil {
			t.Fatal(err)
		}
		connected := follow(t, b, "a:1")

		// a goes: b was up, so it waits ReconnectDelay between dials.
		a.Close()
		synctest.Wait()
		time.Sleep(100 * time.Millisecond)
		a2 := newRep(3)
		defer a2.Close()
		if _, err := a2.BecomeMaster(2); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if err := b.BecomeSlave("a:1"); err != nil {
			t.Fatal(err)
		}
		<-connected
		if d := time.Since(t0); d > 50*time.Millisecond {
			t.Fatalf("b reached the master named again at its address %v after the role change, want at once", d)
		}
	})
}
