package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/internal/proctest"
)

// mountTmpfs mounts a tmpfs of size bytes on a new directory under
// t.TempDir and unmounts it when the test ends (after the processes the
// test starts later are killed). It skips the test when mounting is not
// permitted.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size))
	if err != nil {
		t.Skipf("disk-full scenario skipped: cannot mount a size-limited tmpfs on %s (%v); it needs root or CAP_SYS_ADMIN", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// growTmpfs remounts the tmpfs at dir with a new size.
func growTmpfs(t *testing.T, dir string, size int64) {
	t.Helper()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatalf("remount %s with size=%d: %v", dir, size, err)
	}
}

// diskFullSize holds four 256 KiB segment files (three and a preallocated
// next one) and the small files, not a fifth segment.
const diskFullSize = 4*segSize + 64<<10

// TestDiskFullSlave: the slave's file system fills up. Creating its next
// segment fails with ENOSPC: the slave logs one clear error, stops
// replicating and says why in its status and metrics; the master's sync
// puts are no longer PUT_OK; every earlier PUT_OK is on the slave and the
// slave's log is a byte-identical prefix of the master's. With space again
// and a restart, the slave catches up and ends byte-identical.
func TestDiskFullSlave(t *testing.T) {
	t.Parallel()
	for _, seed := range seeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { diskFullSlave(t, seed) })
	}
}

func diskFullSlave(t *testing.T, seed uint64) {
	mnt := mountTmpfs(t, diskFullSize)
	mdir, sdir := filepath.Join(t.TempDir(), "m"), filepath.Join(mnt, "s")
	m := proctest.StartMaster(t, bin, mdir, "--replication", "sync", "--slave-timeout", "500ms",
		"--segment-size", segSizeArg, "--max-message-size", maxMsgArg)
	s := proctest.StartSlave(t, bin, sdir, m.HA, m.API, "--segment-size", segSizeArg)
	waitSlaves(t, m, 1)
	p := startProducer(t, seed, m.API, 3)
	proctest.Eventually(t, "the slave stops on a full disk", proctest.WaitTimeout, func() error {
		if log := s.ReadLog(); !strings.Contains(log, "replication stopped: the store failed") {
			return fmt.Errorf("master at %d, slave at %d", status(t, m.API).MaxOffset, status(t, s.API).MaxOffset)
		}
		return nil
	})
	ss := status(t, s.API)
	// Puts after the slave stopped are stored on the master but are not
	// PUT_OK.
	p.waitAnswers(t, 20)
	p.halt()
	acks, byState, _ := p.snapshot()
	for _, a := range acks {
		if a.Status == "PUT_OK" && a.Next > ss.MaxOffset {
			t.Fatalf("PUT_OK for a message ending at %d, past the full slave's max offset %d", a.Next, ss.MaxOffset)
		}
	}
	run := lastRun(s.ReadLog())
	if !strings.Contains(run, "no space left on device") {
		t.Fatalf("the slave's log does not name the cause:\n%s", run)
	}
	if n := strings.Count(run, "replication stopped: the store failed"); n != 1 {
		t.Fatalf("the slave logged the failure %d times, want once", n)
	}
	if ss.Master == nil || !strings.Contains(ss.Master.LastError, "no space left on device") || ss.Master.Connected {
		t.Fatalf("slave status does not show the failure: %+v", ss.Master)
	}
	sc := proctest.NewClient(s.API, 0)
	defer sc.Close()
	if v, ok, err := sc.Metric(context.Background(), "replicator_ha_client_connected"); err != nil || !ok || v != 0 {
		t.Fatalf("replicator_ha_client_connected = %v (found %v, %v), want 0", v, ok, err)
	}
	okOnSlave, err := verifyOnNode(context.Background(), seed, s.API, acks, true)
	if err != nil {
		t.Fatal(err)
	}
	compareDirs(t, mdir, sdir, ss.MinOffset, ss.MaxOffset)

	// Room again, restart: the slave catches up.
	growTmpfs(t, mnt, 64<<20)
	s.Stop()
	s.Restart()
	ms := waitCaughtUp(t, m, s)
	all, err := verifyOnNode(context.Background(), seed, s.API, acks, false)
	if err != nil {
		t.Fatal(err)
	}
	s.Stop()
	m.Stop()
	compareDirs(t, mdir, sdir, ms.MinOffset, ms.MaxOffset)
	result(t, "slave_stopped_at=%d answers=%v put_ok_verified_on_full_slave=%d stored_verified_after_restart=%d losses=0", ss.MaxOffset, byState, okOnSlave, all)
}

// TestDiskFullMaster: the master's file system fills up. Puts that need a
// new segment fail with 507 and a JSON message naming ENOSPC (never
// PUT_OK), /readyz answers 503 "disk full", the error is logged (rate-
// limited, not once per put) and counted, nothing stored is damaged, and
// once there is room again puts are PUT_OK without a restart and /readyz
// is 200 again; the slave ends byte-identical.
func TestDiskFullMaster(t *testing.T) {
	t.Parallel()
	for _, seed := range seeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { diskFullMaster(t, seed) })
	}
}

func diskFullMaster(t *testing.T, seed uint64) {
	mnt := mountTmpfs(t, diskFullSize)
	mdir, sdir := filepath.Join(mnt, "m"), filepath.Join(t.TempDir(), "s")
	m := proctest.StartMaster(t, bin, mdir, "--replication", "sync", "--slave-timeout", "5s",
		"--segment-size", segSizeArg, "--max-message-size", maxMsgArg)
	s := proctest.StartSlave(t, bin, sdir, m.HA, m.API, "--segment-size", segSizeArg)
	waitSlaves(t, m, 1)
	p := startProducer(t, seed, m.API, 3)
	var full error
	proctest.Eventually(t, "puts fail on a full disk", proctest.WaitTimeout, func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.errs == 0 {
			return fmt.Errorf("master at %d, no error yet", status(t, m.API).MaxOffset)
		}
		full = p.lastErr
		return nil
	})
	p.gate.shut()
	var se *proctest.StatusError
	if !errors.As(full, &se) || se.Code != 507 || !strings.Contains(se.Body, "no space left on device") || !strings.Contains(se.Body, "disk is full") {
		t.Fatalf("a put on a full disk answered %v, want 507 naming ENOSPC", full)
	}
	// Every further put fails the same way, and is not stored.
	before := status(t, m.API).MaxOffset
	_, body := message(seed, 97, 0)
	for range 3 {
		a, err := putOne(t, m.API, "Full", body)
		if !isStatus(err, 507) {
			t.Fatalf("put on a full disk: %+v %v, want 507", a, err)
		}
	}
	if code, body := readyz(t, m.API); code != 503 || !strings.Contains(body, "disk full") {
		t.Fatalf("/readyz on a full disk: %d %s, want 503 disk full", code, body)
	}
	if after := status(t, m.API).MaxOffset; after != before {
		t.Fatalf("failed puts moved the max offset from %d to %d", before, after)
	}
	mc := proctest.NewClient(m.API, 0)
	defer mc.Close()
	if v, ok, err := mc.Metric(context.Background(), `replicator_http_requests_total{code="507",route="put"}`); err != nil || !ok || v < 3 {
		t.Fatalf("replicator_http_requests_total{code=507,route=put} = %v (found %v, %v)", v, ok, err)
	}
	if v, ok, err := mc.Metric(context.Background(), `replicator_http_disk_full`); err != nil || !ok || v != 1 {
		t.Fatalf("replicator_http_disk_full = %v (found %v, %v), want 1", v, ok, err)
	}
	fullPuts, ok, err := mc.Metric(context.Background(), `replicator_http_disk_full_puts_total`)
	if err != nil || !ok || fullPuts < 4 {
		t.Fatalf("replicator_http_disk_full_puts_total = %v (found %v, %v)", fullPuts, ok, err)
	}
	log := lastRun(m.ReadLog())
	if !strings.Contains(log, "no space left on device") {
		t.Fatal("the master's log does not name ENOSPC")
	}
	// One ERROR line per 10 s, not one per failed put.
	if n := strings.Count(log, "put failed"); n < 1 || float64(n) >= fullPuts || n > 3 {
		t.Fatalf("%d put-failure lines for %v failed puts, want a rate-limited few:\n%s", n, fullPuts, log)
	}
	acks, _, errs := p.snapshot()
	if _, err := verifyOnNode(context.Background(), seed, m.API, acks, false); err != nil {
		t.Fatal(err)
	}
	// Room again: puts are PUT_OK without a restart.
	growTmpfs(t, mnt, 64<<20)
	if a, err := putOne(t, m.API, "Full", body); err != nil || a.Status != "PUT_OK" {
		t.Fatalf("put after the disk has room again: %+v %v", a, err)
	}
	if code, body := readyz(t, m.API); code != 200 {
		t.Fatalf("/readyz after a stored put: %d %s, want 200", code, body)
	}
	p.gate.open()
	p.waitOKs(t, p.oks()+20)
	p.halt()
	ms := waitCaughtUp(t, m, s)
	acks, byState, _ := p.snapshot()
	n, err := verifyOnNode(context.Background(), seed, s.API, acks, true)
	if err != nil {
		t.Fatal(err)
	}
	s.Stop()
	m.Stop()
	m.Restart() // recovery of the log written through the full disk
	if st := status(t, m.API); st.MaxOffset != ms.MaxOffset {
		t.Fatalf("after a restart the master's max offset is %d, was %d", st.MaxOffset, ms.MaxOffset)
	}
	m.Stop()
	compareDirs(t, mdir, sdir, ms.MinOffset, ms.MaxOffset)
	result(t, "failed_puts_507=%d answers=%v verified_on_slave=%d losses=0", errs+3, byState, n)
}

// readyz returns the code and body of GET /readyz.
func readyz(t *testing.T, apiURL string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(apiURL + "/readyz")
	if err != nil {
		t.Fatalf("GET %s/readyz: %v", apiURL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	c.CloseIdleConnections()
	return resp.StatusCode, string(b)
}
