package faults

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/internal/proctest"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// TestKillSlave: the slave is killed with SIGKILL while it catches up
// (over a bandwidth-limited link, so that catch-up lasts long enough to be
// interrupted at random points) and while it streams new puts. Before
// each restart the test may tear the slave's tail the way a crash in the
// middle of a write does: a prefix of the next record, or garbage. After
// the restart, recovery must cut the torn tail (its log says so), the
// slave must resume from its own last whole record (the offset it reports
// to the master is the end of the records on its disk), and at the end
// both commit logs are byte-identical.
func TestKillSlave(t *testing.T) {
	t.Parallel()
	for _, seed := range seeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { killSlave(t, seed) })
	}
}

// tear modes for the slave's tail after a kill.
const (
	tearNone = iota
	tearPartial
	tearGarbage
	tearModes
)

var tearNames = [tearModes]string{"none", "partial", "garbage"}

func killSlave(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x736c6176))
	catchUpKills, streamKills, backlog := 2, 2, int64(2<<20)
	if long() {
		catchUpKills, streamKills, backlog = 8, 20, 8<<20
	}
	dir := t.TempDir()
	mdir, sdir := filepath.Join(dir, "m"), filepath.Join(dir, "s")
	m := proctest.StartMaster(t, bin, mdir, "--segment-size", segSizeArg, "--max-message-size", maxMsgArg)
	np := newNetProxy(t, m.HA)

	// The slave starts with the empty master (an empty slave starts at
	// the master's last segment), stops, and then has a backlog to catch
	// up, over a link limited to 1 MiB/s.
	s := proctest.StartSlave(t, bin, sdir, np.Addr, m.API, "--segment-size", segSizeArg)
	connectedAt(t, s)
	p := startProducer(t, seed, m.API, 3)
	p.waitOKs(t, 20)
	p.gate.shut()
	waitCaughtUp(t, m, s)
	s.Stop()
	p.gate.open()
	proctest.Eventually(t, "backlog written", proctest.WaitTimeout, func() error {
		if mx := status(t, m.API).MaxOffset; mx < backlog {
			return fmt.Errorf("master max %d", mx)
		}
		return nil
	})
	p.gate.shut()
	np.add("slow", "bandwidth", "downstream", `{"rate":1024}`) // KB/s
	s.Restart()
	var tears [tearModes]int
	cut, startKills := 0, 0
	kill := func(phase string, k int) {
		t.Helper()
		s.Kill()
		mode, off, diag := tearTail(t, rng, filepath.Join(mdir, "commitlog"), filepath.Join(sdir, "commitlog"))
		tears[mode]++
		if rng.IntN(4) == 0 {
			// Kill it again in the middle of its start (recovery, the
			// cut of the torn tail, connecting): a random delay is the
			// fault's timing, not a synchronisation.
			s.Relaunch()
			time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
			s.Kill()
			startKills++
			var err error
			if off, _, err = proctest.ScanEnd(filepath.Join(sdir, "commitlog"), segSize); err != nil {
				t.Fatal(err)
			}
			mode = tearNone // the interrupted run may have cut the tail already
		}
		s.Restart()
		run := lastRun(s.ReadLog())
		if mode != tearNone && !strings.Contains(run, "recovery truncated the torn tail") {
			now, _ := proctest.ReadRange(filepath.Join(sdir, "commitlog"), segSize, off, off+24)
			t.Fatalf("%s kill %d: tail torn (%s) at %d (%s; after the restart %x), but the slave's recovery did not log a cut:\n%s", phase, k, tearNames[mode], off, diag, now, run)
		}
		if strings.Contains(run, "recovery truncated the torn tail") {
			cut++
		}
		got := connectedAt(t, s)
		if got != off {
			t.Fatalf("%s kill %d: the slave resumed from %d, but the records on its disk end at %d (tear %s)", phase, k, got, off, tearNames[mode])
		}
	}

	// Kills during catch-up: at a random point of what is left.
	midCatchUp := 0
	for k := range catchUpKills {
		mx := status(t, m.API).MaxOffset
		from := status(t, s.API).MaxOffset
		target := from + int64(rng.Float64()*float64(mx-from))
		proctest.Eventually(t, "slave progress", proctest.WaitTimeout, func() error {
			if got := status(t, s.API).MaxOffset; got < target {
				return fmt.Errorf("slave at %d, waiting for %d", got, target)
			}
			return nil
		})
		if status(t, s.API).MaxOffset < mx {
			midCatchUp++
		}
		kill("catch-up", k)
	}
	np.remove("slow")

	// Kills while streaming: producers keep putting.
	p.gate.open()
	for k := range streamKills {
		p.waitOKs(t, p.oks()+10+rng.IntN(100))
		kill("streaming", k)
	}
	p.halt()
	ms := waitCaughtUp(t, m, s)
	acks, byState, _ := p.snapshot()
	n, err := verifyOnNode(context.Background(), seed, s.API, acks, true)
	if err != nil {
		t.Fatal(err)
	}
	s.Stop()
	m.Stop()
	files := compareDirs(t, mdir, sdir, ms.MinOffset, ms.MaxOffset)
	result(t, "kills_catch_up=%d (mid_catch_up=%d) kills_streaming=%d kills_during_start=%d tears=none:%d,partial:%d,garbage:%d recovery_cuts=%d put_ok=%d verified_on_slave=%d bytes=%d segment_files=%d losses=0",
		catchUpKills, midCatchUp, streamKills, startKills, tears[tearNone], tears[tearPartial], tears[tearGarbage], cut, byState["PUT_OK"], n, ms.MaxOffset-ms.MinOffset, files)
}

// tearTail finds the end of the whole records on the stopped slave's disk
// and, by a random choice, writes a torn record there: a strict prefix of
// the master's next record, or random bytes. It returns the mode used
// (tearNone when there was no room) and the end of the whole records.
// It also returns what it did, for failure messages: the bytes at the
// end before and after the tear. A write that changes nothing is no tear.
func tearTail(t *testing.T, rng *rand.Rand, mlog, slog string) (int, int64, string) {
	t.Helper()
	end, _, err := proctest.ScanEnd(slog, segSize)
	if err != nil {
		t.Fatal(err)
	}
	mode := rng.IntN(tearModes)
	segStart := end - end%segSize
	path := filepath.Join(slog, store.SegmentName(segStart))
	room := segStart + segSize - end
	// Tear only inside a whole segment file: the store creates a segment
	// at its full size in one step (a crash during creation leaves an
	// empty file, which recovery removes), so a crash cannot leave bytes
	// in a shorter one.
	if fi, err := os.Stat(path); err != nil || fi.Size() != segSize || room < record.FillerSize || mode == tearNone {
		return tearNone, end, ""
	}
	var junk []byte
	if mode == tearPartial {
		hdr, err := proctest.ReadRange(mlog, segSize, end, end+8)
		if err != nil {
			return tearNone, end, "" // the master has nothing there yet
		}
		size := int64(binary.BigEndian.Uint32(hdr))
		if binary.BigEndian.Uint32(hdr[4:]) != record.MagicCode || size > room || size < 2 {
			mode = tearGarbage
		} else {
			rec, err := proctest.ReadRange(mlog, segSize, end, end+size)
			if err != nil {
				t.Fatal(err)
			}
			junk = rec[:1+rng.IntN(int(size)-1)]
		}
	}
	if mode == tearGarbage {
		junk = make([]byte, 1+rng.IntN(int(min(room, 4096))))
		for i := range junk {
			junk[i] = byte(rng.Uint32())
		}
	}
	before, err := proctest.ReadRange(slog, segSize, end, end+int64(len(junk)))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(junk, end-segStart); err != nil {
		t.Fatal(err)
	}
	after, err := proctest.ReadRange(slog, segSize, end, end+int64(len(junk)))
	if err != nil {
		t.Fatal(err)
	}
	diag := fmt.Sprintf("%d bytes written; before %x, after %x", len(junk), before[:min(len(before), 24)], after[:min(len(after), 24)])
	if bytes.Equal(before, after) {
		// Nothing changed: a prefix of one or two bytes of TOTALSIZE is
		// zero (records are far below 16 MiB), and the slave may already
		// hold the prefix written. No tear of the test's making.
		return tearNone, end, diag
	}
	return mode, end, diag
}

// lastRun returns the part of a process log written by its latest run.
func lastRun(log string) string {
	if i := strings.LastIndex(log, "=== run "); i >= 0 {
		return log[i:]
	}
	return log
}

var connectedRE = regexp.MustCompile(`connected to master.*max_offset=(\d+)`)

// connectedAt waits for the latest run of the slave to connect to its
// master and returns the offset it started from.
func connectedAt(t *testing.T, s *proctest.Proc) int64 {
	t.Helper()
	var off int64
	proctest.Eventually(t, "slave connected to the master", proctest.WaitTimeout, func() error {
		mm := connectedRE.FindStringSubmatch(lastRun(s.ReadLog()))
		if mm == nil {
			return fmt.Errorf("no connection in the slave's log yet")
		}
		v, err := strconv.ParseInt(mm[1], 10, 64)
		if err != nil {
			return err
		}
		off = v
		return nil
	})
	return off
}
