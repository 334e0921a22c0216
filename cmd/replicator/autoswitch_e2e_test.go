package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/core/epoch"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/proctest"

	"github.com/replicatorhq/replicator/sdk/store"
)

// asBody is the body of message i of a batch: 4 KiB, so that a few hundred
// messages span more than one 1 MiB segment.
func asBody(batch string, i int) string {
	head := fmt.Sprintf("%s-%04d:", batch, i)
	return head + strings.Repeat(string(rune('a'+i%26)), 4096-len(head))
}

// asPut stores n messages of batch on c and requires PUT_OK (or, async,
// any stored status); it returns the last answer.
func asPut(t *testing.T, c *proctest.Client, batch string, n int) api.PutAnswer {
	t.Helper()
	var last api.PutAnswer
	for i := range n {
		a, err := c.Put(context.Background(), "TopicAS", []byte(asBody(batch, i)))
		if err != nil {
			t.Fatalf("put %s-%d on %s: %v", batch, i, c.Base, err)
		}
		if a.Status != "PUT_OK" {
			t.Fatalf("put %s-%d on %s: %s", batch, i, c.Base, a.Status)
		}
		last = a
	}
	return last
}

func asStatus(t *testing.T, c *proctest.Client) api.Status {
	t.Helper()
	st, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func asMetric(t *testing.T, c *proctest.Client, series string) float64 {
	t.Helper()
	v, ok, err := c.Metric(context.Background(), series)
	if err != nil || !ok {
		t.Fatalf("%s on %s: ok=%v err=%v", series, c.Base, ok, err)
	}
	return v
}

func newASClient(t *testing.T, p *proctest.Proc) *proctest.Client {
	c := proctest.NewClient(p.API, 10*time.Second)
	t.Cleanup(c.Close)
	return c
}

// waitFollowing waits until the slave at sc has the max offset of the
// master at mc and is in TRANSFER.
func waitFollowing(t *testing.T, sc, mc *proctest.Client) api.Status {
	t.Helper()
	return sc.WaitStatus(t, sc.Base+" follows "+mc.Base, proctest.WaitTimeout, func(st api.Status) error {
		ms, err := mc.Status(context.Background())
		if err != nil {
			return err
		}
		if st.Master == nil || st.Master.HandshakeState != "TRANSFER" || st.MaxOffset != ms.MaxOffset {
			return fmt.Errorf("slave %+v at %d, master at %d", st.Master, st.MaxOffset, ms.MaxOffset)
		}
		return nil
	})
}

// checkRejoined checks the end of a divergence scenario: the old master
// (old, data in oldDir) follows the new one (nw, data in newDir), its
// commit log and epoch file are byte-identical to the new master's, the
// cut (cutBytes, cutRecords) is in its status, its log (WARN) and
// replicator_ha_truncated_bytes_total, and every message of batches is
// readable from offset 0 in order.
func checkRejoined(t *testing.T, old, nw *proctest.Proc, oldDir, newDir string, cutBytes int64, cutRecords int, batches map[string]int, order []string) {
	t.Helper()
	oc, nc := newASClient(t, old), newASClient(t, nw)
	st := waitFollowing(t, oc, nc)
	ns := asStatus(t, nc)
	tr := st.Master.LastTruncation
	if tr == nil || tr.Bytes != cutBytes || tr.Records != int64(cutRecords) || tr.From-tr.To != cutBytes {
		t.Fatalf("the old master's last truncation is %+v, want %d bytes, %d records", tr, cutBytes, cutRecords)
	}
	if st.Epoch != ns.Epoch || st.EpochEntries != ns.EpochEntries {
		t.Fatalf("old master at epoch %d (%d entries), new master at %d (%d)", st.Epoch, st.EpochEntries, ns.Epoch, ns.EpochEntries)
	}
	if v := asMetric(t, oc, "replicator_ha_truncated_bytes_total"); v != float64(cutBytes) {
		t.Fatalf("replicator_ha_truncated_bytes_total = %v, want %d", v, cutBytes)
	}
	warn := fmt.Sprintf("bytes=%d records=%d", cutBytes, cutRecords)
	if l := old.ReadLog(); !strings.Contains(l, "[WARN]") || !strings.Contains(l, "truncated the commit log to the consistent point") || !strings.Contains(l, warn) {
		t.Fatalf("the old master's log does not report the cut (%s) at WARN", warn)
	}
	files, err := proctest.CompareCommitLogs(filepath.Join(oldDir, "commitlog"), filepath.Join(newDir, "commitlog"), ns.SegmentSize, ns.MinOffset, ns.MaxOffset)
	if err != nil {
		t.Fatal(err)
	}
	if files < 2 {
		t.Fatalf("only %d segment files compared; the scenario should span two", files)
	}
	ea, err1 := os.ReadFile(filepath.Join(oldDir, epoch.FileName))
	eb, err2 := os.ReadFile(filepath.Join(newDir, epoch.FileName))
	if err1 != nil || err2 != nil || !bytes.Equal(ea, eb) {
		t.Fatalf("epoch files differ (%v, %v):\nold master %q\nnew master %q", err1, err2, ea, eb)
	}
	msgs, err := oc.ReadFrom(context.Background(), 0)
	if err != nil {
		t.Fatalf("reading the old master from offset 0: %v", err)
	}
	total := 0
	for _, b := range order {
		total += batches[b]
	}
	if len(msgs) != total {
		t.Fatalf("the old master serves %d messages from offset 0, want %d", len(msgs), total)
	}
	k := 0
	for _, b := range order {
		for i := range batches[b] {
			if string(msgs[k].Body) != asBody(b, i) {
				t.Fatalf("message %d is %.20q, want %s-%d", k, msgs[k].Body, b, i)
			}
			k++
		}
	}
}

// TestAutoSwitchDivergenceRestart is issue 14's scenario with restarts: M
// and S replicate 100 messages, S stops, M takes 50 more (async) and is
// killed, S starts as a master on its own directory (a new epoch) and
// takes 200, M's directory starts as a slave of S: the 50 are cut, M's log
// ends byte-identical to S's and all 300 messages read back.
func TestAutoSwitchDivergenceRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mdir, sdir := filepath.Join(dir, "m"), filepath.Join(dir, "s")
	m := proctest.StartAutoSwitch(t, binPath, "master", mdir, "", "")
	s := proctest.StartAutoSwitch(t, binPath, "slave", sdir, m.HA, m.API)
	mc, sc := newASClient(t, m), newASClient(t, s)
	asPut(t, mc, "common", 100)
	waitFollowing(t, sc, mc)
	s.Stop()
	common := asStatus(t, mc).MaxOffset
	last := asPut(t, mc, "lost", 50)
	m.Kill()

	s2 := proctest.StartAutoSwitch(t, binPath, "master", sdir, "", "")
	s2c := newASClient(t, s2)
	if st := asStatus(t, s2c); st.Epoch != 2 || st.EpochEntries != 2 || st.MaxOffset != common {
		t.Fatalf("S restarted as a master: epoch %d (%d entries) at %d, want epoch 2 (2 entries) at %d", st.Epoch, st.EpochEntries, st.MaxOffset, common)
	}
	asPut(t, s2c, "new", 200)
	m2 := proctest.StartAutoSwitch(t, binPath, "slave", mdir, s2.HA, s2.API)
	checkRejoined(t, m2, s2, mdir, sdir, last.NextOffset-common, 50, map[string]int{"common": 100, "new": 200}, []string{"common", "new"})
	rec, ok, err := readRole(mdir)
	if err != nil || !ok || rec != "slave" {
		t.Fatalf("M's role file says %q (%v, %v), want slave", rec, ok, err)
	}
}

// TestAutoSwitchDivergencePromoteDemote is the same scenario with runtime
// role changes and no restart of M: S stops, M takes 50, M is demoted to a
// slave of S (down), S restarts as a slave and is promoted with `replicator
// promote`, takes 200; M connects, truncates and catches up.
func TestAutoSwitchDivergencePromoteDemote(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mdir, sdir := filepath.Join(dir, "m"), filepath.Join(dir, "s")
	m := proctest.StartAutoSwitch(t, binPath, "master", mdir, "", "")
	s := proctest.StartAutoSwitch(t, binPath, "slave", sdir, m.HA, m.API)
	mc, sc := newASClient(t, m), newASClient(t, s)
	asPut(t, mc, "common", 100)
	waitFollowing(t, sc, mc)
	s.Stop()
	common := asStatus(t, mc).MaxOffset
	last := asPut(t, mc, "lost", 50)

	code, out, errb := runCLI(t, "", "demote", "--api", m.API, "--master", s.HA)
	if code != 0 || !strings.Contains(out, "is now SLAVE") {
		t.Fatalf("demote: exit %d:\n%s%s", code, out, errb)
	}
	if _, err := mc.Put(context.Background(), "TopicAS", []byte("refused")); !isCode(err, 403) {
		t.Fatalf("put on the demoted master: %v, want 403", err)
	}
	s.Restart()
	code, out, errb = runCLI(t, "", "promote", "--api", s.API)
	if code != 0 || !strings.Contains(out, "(epoch 2)") {
		t.Fatalf("promote: exit %d:\n%s%s", code, out, errb)
	}
	if st := asStatus(t, sc); st.Role != "ASYNC_MASTER" || st.HAAddr != s.HA || st.MaxOffset != common {
		t.Fatalf("promoted S: %+v", st)
	}
	asPut(t, sc, "new", 200)
	checkRejoined(t, m, s, mdir, sdir, last.NextOffset-common, 50, map[string]int{"common": 100, "new": 200}, []string{"common", "new"})
}

// TestAutoSwitchDivergenceLongerOldMaster: the old master's log is longer
// than the new master's (300 unreplicated messages against 200 new ones).
func TestAutoSwitchDivergenceLongerOldMaster(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mdir, sdir := filepath.Join(dir, "m"), filepath.Join(dir, "s")
	m := proctest.StartAutoSwitch(t, binPath, "master", mdir, "", "")
	s := proctest.StartAutoSwitch(t, binPath, "slave", sdir, m.HA, m.API)
	mc, sc := newASClient(t, m), newASClient(t, s)
	asPut(t, mc, "common", 100)
	waitFollowing(t, sc, mc)
	s.Stop()
	common := asStatus(t, mc).MaxOffset
	last := asPut(t, mc, "lost", 300)
	m.Kill()

	s.Restart() // a slave of the dead master
	if st, err := sc.Role(context.Background(), api.RoleRequest{Role: api.RoleMaster}); err != nil || st.Epoch != 2 {
		t.Fatalf("promote: %+v %v", st, err)
	}
	newLast := asPut(t, sc, "new", 200)
	if newLast.NextOffset >= last.NextOffset {
		t.Fatalf("the new master's log (%d) should be shorter than the old one's (%d)", newLast.NextOffset, last.NextOffset)
	}
	m2 := proctest.StartAutoSwitch(t, binPath, "slave", mdir, s.HA, s.API)
	checkRejoined(t, m2, s, mdir, sdir, last.NextOffset-common, 300, map[string]int{"common": 100, "new": 200}, []string{"common", "new"})
}

// TestAutoSwitchNoConsistentPoint: a slave whose epochs share nothing with
// its master's refuses: status, metric, one ERROR line; it retries and
// never appends.
func TestAutoSwitchNoConsistentPoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := proctest.StartAutoSwitch(t, binPath, "master", filepath.Join(dir, "a"), "", "")
	ac := newASClient(t, a)
	asPut(t, ac, "a", 20)
	// b is a master of epoch 5 with a log of its own.
	b := proctest.StartAutoSwitch(t, binPath, "slave", filepath.Join(dir, "b"), "127.0.0.1:1", a.API)
	bc := newASClient(t, b)
	if _, err := bc.Role(context.Background(), api.RoleRequest{Role: api.RoleMaster, Epoch: 5}); err != nil {
		t.Fatal(err)
	}
	asPut(t, bc, "b", 10)
	before, err := os.ReadFile(filepath.Join(dir, "b", "commitlog", store.SegmentName(0)))
	if err != nil {
		t.Fatal(err)
	}
	bmax := asStatus(t, bc).MaxOffset
	if _, err := bc.Role(context.Background(), api.RoleRequest{Role: api.RoleSlave, Master: a.HA}); err != nil {
		t.Fatal(err)
	}
	// Refused at least twice: it retries after the reconnect delay.
	proctest.Eventually(t, "b refuses twice", proctest.WaitTimeout, func() error {
		v, ok, err := bc.Metric(context.Background(), "replicator_ha_no_consistent_point_total")
		if err != nil || !ok || v < 2 {
			return fmt.Errorf("replicator_ha_no_consistent_point_total = %v (%v, %v)", v, ok, err)
		}
		return nil
	})
	st := asStatus(t, bc)
	if st.Master == nil || !strings.Contains(st.Master.Unhealthy, "no consistent point") || st.MaxOffset != bmax {
		t.Fatalf("b's status: %+v master %+v", st, st.Master)
	}
	errs := 0
	for _, l := range strings.Split(b.ReadLog(), "\n") {
		if strings.Contains(l, "[ERROR]") && strings.Contains(l, "no consistent point") {
			errs++
		}
	}
	if errs != 1 {
		t.Fatalf("b logged %d ERROR lines about the consistent point, want 1", errs)
	}
	after, err := os.ReadFile(filepath.Join(dir, "b", "commitlog", store.SegmentName(0)))
	if err != nil || !bytes.Equal(before, after) {
		t.Fatalf("b's commit log changed while it refused (%v)", err)
	}
	for _, s := range asStatus(t, ac).Slaves {
		if s.InSync {
			t.Fatalf("the refusing slave is in the master's in-sync set: %+v", s)
		}
	}
}

// TestAutoSwitchReadConfirmed: a --read-confirmed slave serves reads only
// up to the confirm offset (held by every in-sync replica): with another
// in-sync slave stopped, its reads stop where that slave stopped while its
// status shows the true max offset; they resume when it does.
func TestAutoSwitchReadConfirmed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := proctest.StartAutoSwitch(t, binPath, "master", filepath.Join(dir, "m"), "", "", "--ha-max-time-slave-not-catchup", "10m")
	mc := newASClient(t, m)
	r := proctest.StartAutoSwitch(t, binPath, "slave", filepath.Join(dir, "r"), m.HA, m.API, "--read-confirmed")
	o := proctest.StartAutoSwitch(t, binPath, "slave", filepath.Join(dir, "o"), m.HA, m.API)
	rc, oc := newASClient(t, r), newASClient(t, o)
	mc.WaitStatus(t, "both slaves in sync", proctest.WaitTimeout, func(st api.Status) error {
		if len(st.InSync) != 3 {
			return fmt.Errorf("in-sync set %v", st.InSync)
		}
		return nil
	})
	asPut(t, mc, "first", 10)
	first := asStatus(t, mc).MaxOffset
	// Both slaves acknowledged the first batch: the confirm offset the
	// master sends from now on is at least first.
	mc.WaitStatus(t, "both slaves acked the first batch", proctest.WaitTimeout, func(st api.Status) error {
		for _, s := range st.Slaves {
			if s.AckOffset != first {
				return fmt.Errorf("slave %d acked %d, want %d", s.BrokerID, s.AckOffset, first)
			}
		}
		return nil
	})
	o.Signal(syscall.SIGSTOP)
	asPut(t, mc, "second", 10)
	second := asStatus(t, mc).MaxOffset
	st := waitFollowing(t, rc, mc)
	if !st.ReadConfirmed || st.ConfirmOffset != first || st.MaxOffset != second {
		t.Fatalf("read-confirmed slave: confirm %d max %d read_confirmed %v, want confirm %d, max %d", st.ConfirmOffset, st.MaxOffset, st.ReadConfirmed, first, second)
	}
	msgs, err := rc.ReadFrom(context.Background(), 0)
	if err != nil || len(msgs) != 10 {
		t.Fatalf("read-confirmed slave serves %d messages (%v), want the 10 confirmed", len(msgs), err)
	}
	page, err := rc.Messages(context.Background(), 0, 100)
	if err != nil || page.MaxOffset != first {
		t.Fatalf("read-confirmed slave's max_offset in messages: %d (%v), want %d", page.MaxOffset, err, first)
	}
	if _, err := rc.Messages(context.Background(), first+1, 1); !isCode(err, 416) {
		t.Fatalf("read past the confirm offset: %v, want 416", err)
	}
	o.Signal(syscall.SIGCONT)
	// Each new message carries the master's confirm offset of the moment:
	// once the resumed slave acked the second batch, it passes second.
	extra := 0
	rc.WaitStatus(t, "confirm offset after the other slave resumed", proctest.WaitTimeout, func(st api.Status) error {
		if st.ConfirmOffset >= second {
			return nil
		}
		extra++
		if _, err := mc.Put(context.Background(), "TopicAS", []byte(asBody("extra", extra))); err != nil {
			return err
		}
		return fmt.Errorf("confirm offset %d, want %d", st.ConfirmOffset, second)
	})
	if msgs, err := oc.ReadFrom(context.Background(), 0); err != nil || len(msgs) < 20 {
		t.Fatalf("the slave without --read-confirmed: %d messages (%v), want all", len(msgs), err)
	}
	if msgs, err := rc.ReadFrom(context.Background(), 0); err != nil || len(msgs) < 20 {
		t.Fatalf("after the resume: %d messages (%v), want at least 20", len(msgs), err)
	}
}

// TestClassicSlaveOnExMasterRefused: issue 19 item 1. A classic slave
// started on a data directory that last ran as a master (DATA/role) exits
// with a message that says why and what to do; --allow-diverged-rejoin
// starts it.
func TestClassicSlaveOnExMasterRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mdir := filepath.Join(dir, "m")
	m := startMaster(t, mdir)
	put(t, m.api, "T", "taken by the old master")
	m.stop()
	if rec, ok, err := readRole(mdir); err != nil || !ok || rec != "master" {
		t.Fatalf("role file after the master ran: %q %v %v", rec, ok, err)
	}
	n := startMaster(t, filepath.Join(dir, "n"))
	pp := ports(t, 1)
	code, _, errb := runCLI(t, "", "slave", "--data", mdir, "--listen", pp[0], "--master", n.ha, "--segment-size", testSegment)
	if code != exitError {
		t.Fatalf("classic slave on the ex-master's directory: exit %d, want %d:\n%s", code, exitError, errb)
	}
	for _, want := range []string{"last ran as a classic master", "cannot detect", "Re-seed", "--ha-protocol autoswitch", "--allow-diverged-rejoin"} {
		if !strings.Contains(errb, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, errb)
		}
	}
	if rec, _, _ := readRole(mdir); rec != "master" {
		t.Fatalf("the refused start rewrote the role file: %q", rec)
	}
	s := startSlave(t, mdir, n, "--allow-diverged-rejoin")
	if l := readLog(t, s); !strings.Contains(l, "--allow-diverged-rejoin") || !strings.Contains(l, "[WARN]") {
		t.Fatalf("the override is not logged at WARN:\n%s", l)
	}
	s.stop()
	if rec, _, _ := readRole(mdir); rec != "slave" {
		t.Fatalf("role file after the slave ran: %q", rec)
	}
	// Now a slave: it starts without the override.
	startSlave(t, mdir, n).stop()
	n.stop()
}

// TestRoleAPIErrors: POST /v1/role against real nodes: 409 in classic
// mode, 401 without the token, 400 on bad bodies, 409 for a promote of a
// master or an older epoch.
func TestRoleAPIErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	classic := startMaster(t, filepath.Join(dir, "c"))
	code, b := httpDo(t, "POST", classic.api+"/v1/role", nil, []byte(`{"role":"master"}`))
	if code != 409 || !strings.Contains(string(b), "autoswitch") {
		t.Fatalf("classic: %d %s", code, b)
	}
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("role-test-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := proctest.StartAutoSwitch(t, binPath, "master", filepath.Join(dir, "m"), "", "", "--api-token-file", tok)
	auth := map[string][]string{"Authorization": {"Bearer role-test-token-0123456789"}}
	for _, c := range []struct {
		hdr  map[string][]string
		body string
		code int
		want string
	}{
		{nil, `{"role":"slave","master":"127.0.0.1:1"}`, 401, "bearer token"},
		{auth, `{"role":"boss"}`, 400, "invalid role"},
		{auth, `{"role":"slave"}`, 400, `needs \"master\"`},
		{auth, `{"role":"master"}`, 409, "already the master of epoch 1"},
		{auth, `{"role":"master","epoch":1}`, 409, "already the master"},
	} {
		code, b := httpDo(t, "POST", m.API+"/v1/role", c.hdr, []byte(c.body))
		if code != c.code || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %d %s, want %d with %q", c.body, code, b, c.code, c.want)
		}
	}
	// The refused requests changed nothing.
	code, b = httpDo(t, "GET", m.API+"/v1/status", auth, nil)
	if code != 200 || !strings.Contains(string(b), `"epoch":1,`) || !strings.Contains(string(b), `"role":"ASYNC_MASTER"`) {
		t.Fatalf("status after refused changes: %d %s", code, b)
	}
	// An older epoch than the last one is refused on a slave.
	if code, b := httpDo(t, "POST", m.API+"/v1/role", auth, []byte(`{"role":"slave","master":"127.0.0.1:1"}`)); code != 200 {
		t.Fatalf("demote: %d %s", code, b)
	}
	code, b = httpDo(t, "POST", m.API+"/v1/role", auth, []byte(`{"role":"master","epoch":1}`))
	if code != 409 || !strings.Contains(string(b), "last epoch is 1") {
		t.Fatalf("promote to an old epoch: %d %s", code, b)
	}
	classic.stop()
}

func isCode(err error, code int) bool {
	var se *proctest.StatusError
	return errors.As(err, &se) && se.Code == code
}

// readRole returns the role DATA/role records.
func readRole(dir string) (string, bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "role"))
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	for _, r := range []string{"master", "slave"} {
		if bytes.Contains(b, []byte(`"role":"`+r+`"`)) {
			return r, true, nil
		}
	}
	return "", true, fmt.Errorf("role file %q", b)
}

func readLog(t *testing.T, p *proc) string {
	t.Helper()
	b, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// asNode is one node of the three-node cycle test.
type asNode struct {
	p  *proctest.Proc
	c  *proctest.Client
	id int64
}

// TestAutoSwitchCyclesUnderSyncLoad: three nodes, four producers of sync
// puts against whichever node is the master, and repeated failovers
// (demote the master to a slave of an in-sync slave, promote that slave,
// point the third node at it). No message answered PUT_OK is lost: at the
// end every node serves each of them at its offset with its body, and
// the three commit logs are byte-identical.
func TestAutoSwitchCyclesUnderSyncLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	syncFlags := []string{"--replication", "sync", "--slave-timeout", "2s"}
	a := proctest.StartAutoSwitch(t, binPath, "master", filepath.Join(dir, "a"), "", "", syncFlags...)
	b := proctest.StartAutoSwitch(t, binPath, "slave", filepath.Join(dir, "b"), a.HA, a.API, syncFlags...)
	c := proctest.StartAutoSwitch(t, binPath, "slave", filepath.Join(dir, "c"), a.HA, a.API, syncFlags...)
	nodes := []*asNode{{p: a}, {p: b}, {p: c}}
	for _, n := range nodes {
		n.c = proctest.NewClient(n.p.API, 10*time.Second)
		defer n.c.Close()
		n.id = asStatus(t, n.c).BrokerID
	}
	inSync := func(m *asNode, n *asNode) {
		t.Helper()
		m.c.WaitStatus(t, fmt.Sprintf("broker %d in the in-sync set of %d", n.id, m.id), proctest.WaitTimeout, func(st api.Status) error {
			if !slices.Contains(st.InSync, n.id) {
				return fmt.Errorf("in-sync set %v", st.InSync)
			}
			return nil
		})
	}
	var cur atomic.Pointer[asNode]
	cur.Store(nodes[0])
	inSync(nodes[0], nodes[1])
	inSync(nodes[0], nodes[2])

	type okPut struct {
		offset int64
		body   string
	}
	var (
		mu    sync.Mutex
		oks   []okPut
		other = map[string]int{}
		stop  = make(chan struct{})
		wg    sync.WaitGroup
	)
	okCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(oks)
	}
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := proctest.NewClient("", 5*time.Second)
			defer hc.Close()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := cur.Load()
				hc.Base = n.p.API
				body := fmt.Sprintf("p%d-%06d-%s", p, i, strings.Repeat("x", 200))
				ans, err := hc.Put(context.Background(), "TopicCycle", []byte(body))
				mu.Lock()
				switch {
				case err == nil && ans.Status == "PUT_OK":
					oks = append(oks, okPut{ans.Offset, body})
				case err == nil:
					other[ans.Status]++
				default:
					var se *proctest.StatusError
					if errors.As(err, &se) {
						other[fmt.Sprint(se.Code)]++
					} else {
						other["error"]++
					}
				}
				mu.Unlock()
			}
		}()
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	waitOKs := func(n int) {
		t.Helper()
		want := okCount() + n
		proctest.Eventually(t, fmt.Sprintf("%d PUT_OK", want), proctest.WaitTimeout, func() error {
			if got := okCount(); got < want {
				return fmt.Errorf("%d PUT_OK", got)
			}
			return nil
		})
	}
	const cycles = 4
	waitOKs(50)
	for cycle := range cycles {
		x := cur.Load()
		var y, z *asNode
		for _, n := range nodes {
			if n == x {
				continue
			}
			if y == nil {
				y = n
			} else {
				z = n
			}
		}
		if cycle%2 == 1 {
			y, z = z, y
		}
		inSync(x, y)
		waitOKs(30)
		if _, err := x.c.Role(context.Background(), api.RoleRequest{Role: api.RoleSlave, Master: y.p.HA}); err != nil {
			t.Fatalf("cycle %d: demote %d: %v", cycle, x.id, err)
		}
		st, err := y.c.Role(context.Background(), api.RoleRequest{Role: api.RoleMaster})
		if err != nil {
			t.Fatalf("cycle %d: promote %d: %v", cycle, y.id, err)
		}
		if st.Epoch != int32(cycle+2) {
			t.Fatalf("cycle %d: promoted at epoch %d, want %d", cycle, st.Epoch, cycle+2)
		}
		cur.Store(y)
		if _, err := z.c.Role(context.Background(), api.RoleRequest{Role: api.RoleSlave, Master: y.p.HA}); err != nil {
			t.Fatalf("cycle %d: point %d at %d: %v", cycle, z.id, y.id, err)
		}
		waitOKs(30)
	}
	close(stop)
	wg.Wait()
	m := cur.Load()
	for _, n := range nodes {
		if n != m {
			waitFollowing(t, n.c, m.c)
		}
	}
	mu.Lock()
	t.Logf("%d PUT_OK over %d failovers; other answers: %v", len(oks), cycles, other)
	mu.Unlock()
	ms := asStatus(t, m.c)
	for _, n := range nodes {
		msgs, err := n.c.ReadFrom(context.Background(), 0)
		if err != nil {
			t.Fatalf("reading broker %d: %v", n.id, err)
		}
		byOffset := make(map[int64]string, len(msgs))
		for _, msg := range msgs {
			byOffset[msg.Offset] = string(msg.Body)
		}
		for _, ok := range oks {
			if got, found := byOffset[ok.offset]; !found || got != ok.body {
				t.Fatalf("broker %d lost a PUT_OK message: offset %d holds %.12q, want %.12q", n.id, ok.offset, got, ok.body)
			}
		}
		if n != m {
			if _, err := proctest.CompareCommitLogs(filepath.Join(dir, dirOf(nodes, n), "commitlog"), filepath.Join(dir, dirOf(nodes, m), "commitlog"), ms.SegmentSize, ms.MinOffset, ms.MaxOffset); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func dirOf(nodes []*asNode, n *asNode) string {
	return []string{"a", "b", "c"}[slices.Index(nodes, n)]
}

// TestAutoSwitchDemoteFailsWaitingPuts: a sync put waiting for a stopped
// in-sync slave fails at once with 503 when its master is demoted, saying
// that the message is stored on this node but may be cut; a put after the
// demote answers 403 and stores nothing.
func TestAutoSwitchDemoteFailsWaitingPuts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := proctest.StartAutoSwitch(t, binPath, "master", filepath.Join(dir, "m"), "", "", "--replication", "sync", "--slave-timeout", "30s")
	s := proctest.StartAutoSwitch(t, binPath, "slave", filepath.Join(dir, "s"), m.HA, m.API)
	mc := newASClient(t, m)
	mc.WaitStatus(t, "slave in sync", proctest.WaitTimeout, func(st api.Status) error {
		if len(st.InSync) != 2 {
			return fmt.Errorf("in-sync set %v", st.InSync)
		}
		return nil
	})
	asPut(t, mc, "before", 1)
	s.Signal(syscall.SIGSTOP)
	defer s.Signal(syscall.SIGCONT)
	type result struct {
		err error
		at  time.Time
	}
	max0 := asStatus(t, mc).MaxOffset
	done := make(chan result, 1)
	go func() {
		c := proctest.NewClient(m.API, time.Minute)
		defer c.Close()
		_, err := c.Put(context.Background(), "TopicAS", []byte("waiting"))
		done <- result{err, time.Now()}
	}()
	proctest.Eventually(t, "the put is stored and waits", proctest.WaitTimeout, func() error {
		if st := asStatus(t, mc); st.MaxOffset == max0 {
			return errors.New("not stored yet")
		}
		return nil
	})
	select {
	case r := <-done:
		t.Fatalf("the sync put returned while its slave is stopped: %v", r.err)
	default:
	}
	demoted := time.Now()
	if _, err := mc.Role(context.Background(), api.RoleRequest{Role: api.RoleSlave, Master: s.HA}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	var se *proctest.StatusError
	if !errors.As(r.err, &se) || se.Code != 503 || !strings.Contains(se.Body, "stored on this node at offset") || !strings.Contains(se.Body, "may be cut") {
		t.Fatalf("the waiting put: %v, want 503 saying it is stored but may be cut", r.err)
	}
	if el := r.at.Sub(demoted); el > 5*time.Second {
		t.Fatalf("the waiting put failed %s after the demote, want at once", el)
	}
	before := asStatus(t, mc).MaxOffset
	if _, err := mc.Put(context.Background(), "TopicAS", []byte("after")); !isCode(err, 403) {
		t.Fatalf("put after the demote: %v, want 403", err)
	}
	if st := asStatus(t, mc); st.MaxOffset != before || st.Role != "SLAVE" {
		t.Fatalf("after the refused put: role %s max %d, want SLAVE at %d", st.Role, st.MaxOffset, before)
	}
}
