package core_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/core"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
)

// TestCoreTCPClassicDivergedSlaveRefuses (issue 14, classic hardening):
// issue 14's failover with the classic protocol. The old master's data
// directory, restarted as a slave of the new master, receives bytes at its
// max offset that are not a record where its log has a record boundary: it
// drops the connection, says so once at ERROR and in Status and a metric,
// and appends nothing.
func TestCoreTCPClassicDivergedSlaveRefuses(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	tr := tcptransport.New(tcptransport.DefaultOptions())
	ctx := context.Background()
	mlog, slog := openLog(t, mdir), openLog(t, sdir)
	m := startTCPMaster(t, mlog, tr, core.MasterConfig{})
	s := startTCPSlave(t, slog, tr, m)
	for i := range 100 {
		if _, err := m.Put(ctx, msg(i)); err != nil {
			t.Fatal(err)
		}
	}
	waitMax(slog, mlog.Bounds().Max)
	closeAll(t, s)
	for i := 100; i < 150; i++ {
		if _, err := m.Put(ctx, msg(i)); err != nil {
			t.Fatal(err)
		}
	}
	closeAll(t, m, mlog, slog)

	// S becomes the master and takes 200 new messages.
	slog = openLog(t, sdir)
	defer slog.Close()
	m2 := startTCPMaster(t, slog, tr, core.MasterConfig{})
	defer m2.Close()
	for i := range 200 {
		if _, err := m2.Put(ctx, msg(1000+3*i)); err != nil {
			t.Fatal(err)
		}
	}
	// M's directory restarts as S's slave.
	mlog = openLog(t, mdir)
	defer mlog.Close()
	before := mlog.Bounds().Max
	reg := prometheus.NewRegistry()
	s2, err := core.NewSlave(mlog, tr, core.SlaveConfig{MasterAddr: m2.Addr(), Logger: tlogger(t), Registerer: reg, ReconnectDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Start(); err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	deadline := time.Now().Add(20 * time.Second)
	for counterValue(t, reg, "replicator_ha_diverged_log_total") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no divergence detected; status %+v", s2.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if u := s2.Status().Unhealthy; !strings.Contains(u, "not a record") {
		t.Fatalf("Unhealthy %q", u)
	}
	if got := mlog.Bounds().Max; got != before {
		t.Fatalf("old master appended: max %d, was %d", got, before)
	}
	for _, si := range m2.Status().Slaves {
		if si.AckOffset > before {
			t.Fatalf("the diverged slave acked %d beyond what it held (%d)", si.AckOffset, before)
		}
	}
}

// TestCoreTCPClassicPartialRecordContinues: a classic slave created over a
// log that ends inside a record (a replica's partial record) receives the
// rest of that record first: those bytes are not a record header, but the
// log has no record boundary there, so it replicates on.
func TestCoreTCPClassicPartialRecordContinues(t *testing.T) {
	tr := tcptransport.New(tcptransport.DefaultOptions())
	ctx := context.Background()
	mlog, slog := openLog(t, t.TempDir()), openLog(t, t.TempDir())
	defer mlog.Close()
	defer slog.Close()
	for i := range 20 {
		if _, err := mlog.Append(ctx, msg(i)); err != nil {
			t.Fatal(err)
		}
	}
	v, err := mlog.Read(0, 300)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := slog.AppendAt(0, v.Data); err != nil { // 300 bytes: inside the first record
		t.Fatal(err)
	}
	v.Release()
	m := startTCPMaster(t, mlog, tr, core.MasterConfig{})
	defer m.Close()
	s := startTCPSlave(t, slog, tr, m)
	defer s.Close()
	deadline := time.Now().Add(20 * time.Second)
	for slog.Bounds().Max != mlog.Bounds().Max {
		if time.Now().After(deadline) {
			t.Fatalf("slave at %d of %d; status %+v", slog.Bounds().Max, mlog.Bounds().Max, s.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if u := s.Status().Unhealthy; u != "" {
		t.Fatalf("Unhealthy %q", u)
	}
}
