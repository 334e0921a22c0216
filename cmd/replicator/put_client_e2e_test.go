package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	producer "github.com/replicatorhq/replicator/client"
	"github.com/replicatorhq/replicator/internal/proctest"
)

// TestE2EPutFollowsTheMaster: `replicator put` on a slave stores on the
// master the slave names.
func TestE2EPutFollowsTheMaster(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := startMaster(t, filepath.Join(dir, "m"), "--replication", "sync", "--slave-timeout", "2s")
	s := startSlave(t, filepath.Join(dir, "s"), m)
	waitSlaves(t, m, 1)
	code, out, errb := runCLI(t, "one\ntwo\n", "put", "--api", s.api, "--tag", "t1")
	if code != exitOK || strings.Count(out, "PUT_OK") != 2 {
		t.Fatalf("put via the slave: exit %d\n%s%s", code, out, errb)
	}
	msgs := readAll(t, m.api, 0)
	if len(msgs) != 2 || string(msgs[0].Body) != "one" || msgs[1].Tags != "t1" {
		t.Fatalf("master holds %+v", msgs)
	}
	if strings.Contains(out, "epoch=") {
		t.Fatalf("a classic master's put names an epoch:\n%s", out)
	}
}

// TestE2EPutAutoSwitchOrigin: `replicator put` on an autoswitch master
// prints the epoch and the broker id of each PUT_OK, as the JSON answer
// has them.
func TestE2EPutAutoSwitchOrigin(t *testing.T) {
	t.Parallel()
	m := proctest.StartAutoSwitch(t, binPath, "master", filepath.Join(t.TempDir(), "m"), "", "", "--broker-id", "7", "--remoting-listen", "off")
	code, out, errb := runCLI(t, "", "put", "--api", m.API, "one", "two")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 2 || !strings.HasPrefix(lines[0], "PUT_OK offset=0 ") ||
		!strings.HasSuffix(lines[0], " queue_offset=0 epoch=1 broker_id=7") || !strings.HasSuffix(lines[1], " queue_offset=1 epoch=1 broker_id=7") {
		t.Fatalf("put on an autoswitch master: exit %d\n%s%s", code, out, errb)
	}
}

// outcome is what the producer said about one message.
type outcome struct {
	ok     bool // PUT_OK
	offset int64
	stored producer.Storage
	err    error
}

// TestE2EClientRestartUnderLoad kills the master (SIGKILL) and then stops
// it (SIGTERM) while producers keep sync puts in flight through the
// client: every message answered PUT_OK is in the log at its offset after
// the restarts, no message reported not stored is there, and the errors
// say whether the message may be stored.
func TestE2EClientRestartUnderLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := startMaster(t, filepath.Join(dir, "m"), "--replication", "sync", "--slave-timeout", "2s")
	s := startSlave(t, filepath.Join(dir, "s"), m)
	waitSlaves(t, m, 1)

	ctx := context.Background()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	p, err := producer.Dial(dctx, []string{m.api}, producer.WithRetryTimeout(20*time.Second))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	var mu sync.Mutex
	outcomes := map[string]outcome{}
	var answered atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				body := fmt.Sprintf("g%d-%06d", g, i)
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				res, err := p.Send(sctx, &producer.Message{Topic: "Load", QueueID: int32(g), Body: []byte(body)})
				cancel()
				o := outcome{ok: err == nil && res.Status == producer.PutOK, offset: res.Offset, err: err}
				var pe *producer.PutError
				if errors.As(err, &pe) {
					o.stored = pe.Storage
				} else if err != nil {
					t.Errorf("%s: an error that is not a *PutError: %v", body, err)
				}
				mu.Lock()
				outcomes[body] = o
				mu.Unlock()
				answered.Add(1)
			}
		})
	}
	waitAnswered := func(n int64) {
		t.Helper()
		eventually(t, fmt.Sprintf("%d answers", n), func() error {
			if got := answered.Load(); got < n {
				return fmt.Errorf("%d answers", got)
			}
			return nil
		})
	}
	waitAnswered(300)
	m.signal(syscall.SIGKILL)
	<-m.done
	m.restart()
	waitSlaves(t, m, 1)
	waitAnswered(answered.Load() + 300)
	m.stop()
	m.restart()
	waitSlaves(t, m, 1)
	waitAnswered(answered.Load() + 300)
	close(stop)
	wg.Wait()

	waitCaughtUp(t, m, s)
	got := map[string]int64{}
	for _, msg := range readAll(t, m.api, 0) {
		got[string(msg.Body)] = msg.Offset
	}
	var okN, notStored, maybe int
	for body, o := range outcomes {
		off, in := got[body]
		switch {
		case o.ok:
			okN++
			if !in || off != o.offset {
				t.Errorf("%s answered PUT_OK at %d; the log has it: %v at %d", body, o.offset, in, off)
			}
		case o.err != nil && o.stored == producer.NotStored:
			notStored++
			if in {
				t.Errorf("%s reported not stored (%v) is in the log at %d", body, o.err, off)
			}
		case o.err != nil:
			maybe++
		}
	}
	t.Logf("%d messages: %d PUT_OK, %d not stored, %d may be stored", len(outcomes), okN, notStored, maybe)
	// 900 answers at least were waited for; a few per restart may fail.
	if okN < 600 {
		t.Errorf("only %d PUT_OK answers", okN)
	}
}
