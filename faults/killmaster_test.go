package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/internal/proctest"
)

// TestKillMasterDuringSyncPuts: a SYNC_MASTER takes puts from concurrent
// producers and is killed with SIGKILL in the middle of them, again and
// again, and restarted on the same data. After every kill, while the
// master is dead, every message answered PUT_OK so far must already be on
// the slave, byte-identical, at the offset it was given. At the end the
// slave catches up with the restarted master and both commit logs are
// byte-identical.
func TestKillMasterDuringSyncPuts(t *testing.T) {
	t.Parallel()
	for _, seed := range seeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { killMaster(t, seed, cycles()) })
	}
}

func killMaster(t *testing.T, seed uint64, n int) {
	rng := rand.New(rand.NewPCG(seed, 0x6b696c6c))
	dir := t.TempDir()
	mdir, sdir := filepath.Join(dir, "m"), filepath.Join(dir, "s")
	flush := "async"
	if seed%2 == 0 {
		flush = "sync"
	}
	m := proctest.StartMaster(t, bin, mdir, "--replication", "sync", "--slave-timeout", "5s", "--flush", flush,
		"--segment-size", segSizeArg, "--max-message-size", maxMsgArg)
	s := proctest.StartSlave(t, bin, sdir, m.HA, m.API, "--segment-size", segSizeArg)
	waitSlaves(t, m, 1)

	p := startProducer(t, seed, m.API, 3)
	verified := 0
	start := time.Now()
	for c := range n {
		// Let a random number of sync puts succeed, then kill -9 with puts
		// in flight.
		p.waitOKs(t, p.oks()+5+rng.IntN(60))
		p.gate.shut()
		m.Kill()
		acks, _, _ := p.snapshot()
		k, err := verifyOnNode(context.Background(), seed, s.API, acks, true)
		if err != nil {
			t.Fatalf("cycle %d, after kill -9 of the master: %v", c, err)
		}
		verified += k
		m.Restart()
		waitSlaves(t, m, 1)
		p.gate.open()
	}
	p.waitOKs(t, p.oks()+10)
	p.halt()
	ms := waitCaughtUp(t, m, s)
	acks, byState, errs := p.snapshot()
	final, err := verifyOnNode(context.Background(), seed, s.API, acks, true)
	if err != nil {
		t.Fatalf("final check on the slave: %v", err)
	}
	// Everything answered 200 (any status means stored) is on the master.
	stored, err := verifyOnNode(context.Background(), seed, m.API, acks, false)
	if err != nil {
		t.Fatalf("final check on the master: %v", err)
	}
	s.Stop()
	m.Stop()
	files := compareDirs(t, mdir, sdir, ms.MinOffset, ms.MaxOffset)
	result(t, "cycles=%d flush=%s put_ok=%d answers=%v put_errors=%d verified_after_kills=%d verified_final_slave=%d stored_verified_master=%d bytes=%d segment_files=%d losses=0 elapsed=%s",
		n, flush, byState["PUT_OK"], byState, errs, verified, final, stored, ms.MaxOffset-ms.MinOffset, files, time.Since(start).Round(time.Millisecond))
}
