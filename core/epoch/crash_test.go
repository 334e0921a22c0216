package epoch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"syscall"
	"testing"
)

const (
	crashChildEnv = "REPLICATOR_EPOCH_CRASH_CHILD_DIR"
	crashSeedEnv  = "REPLICATOR_EPOCH_CRASH_SEED"
	// crashStepEnv "STEP:K": the writer kills itself at persist step STEP
	// of the first write at or after change K.
	crashStepEnv = "REPLICATOR_EPOCH_CRASH_STEP"
)

type opKind int

const (
	opAppend opKind = iota
	opSuffixByEpoch
	opSuffixByOffset
	opPrefixByOffset
)

// op is one change of the crash workload.
type op struct {
	kind  opKind
	epoch int32
	off   int64
}

// genOp picks the next change from the current list: mostly appends (a
// third of them at the last start offset, the replace case), truncations
// of every kind, now and then down to an empty list.
func genOp(rng *rand.Rand, cur []Entry) op {
	n := len(cur)
	if n == 0 {
		return op{kind: opAppend, epoch: int32(rng.IntN(3)), off: int64(rng.IntN(3)) * 100}
	}
	last := cur[n-1]
	pick := cur[rng.IntN(n)]
	if n > 30 {
		return op{kind: opPrefixByOffset, off: cur[n/2].StartOffset}
	}
	switch r := rng.IntN(20); {
	case r < 12:
		return op{kind: opAppend, epoch: last.Epoch + 1 + int32(rng.IntN(2)), off: last.StartOffset + int64(rng.IntN(3))*100}
	case r < 14:
		return op{kind: opSuffixByEpoch, epoch: pick.Epoch + int32(rng.IntN(2))}
	case r < 16:
		return op{kind: opSuffixByOffset, off: pick.StartOffset + int64(rng.IntN(2))}
	case r < 19:
		return op{kind: opPrefixByOffset, off: pick.StartOffset + int64(rng.IntN(150))}
	default:
		return op{kind: opSuffixByOffset, off: 0}
	}
}

func (o op) apply(f *File) error {
	switch o.kind {
	case opAppend:
		return f.Append(o.epoch, o.off)
	case opSuffixByEpoch:
		return f.TruncateSuffixByEpoch(o.epoch)
	case opSuffixByOffset:
		return f.TruncateSuffixByOffset(o.off)
	default:
		return f.TruncatePrefixByOffset(o.off)
	}
}

// model applies o to es by the documented rules, independently of File.
func (o op) model(es []Entry) []Entry {
	var out []Entry
	switch o.kind {
	case opAppend:
		out = append(out, es...)
		if n := len(out); n > 0 && out[n-1].StartOffset == o.off {
			out = out[:n-1]
		}
		out = append(out, Entry{Epoch: o.epoch, StartOffset: o.off})
	case opSuffixByEpoch:
		for _, e := range es {
			if e.Epoch < o.epoch {
				out = append(out, e)
			}
		}
	case opSuffixByOffset:
		for _, e := range es {
			if e.StartOffset < o.off {
				out = append(out, e)
			}
		}
	case opPrefixByOffset:
		for _, e := range es {
			if e.EndOffset > o.off {
				out = append(out, e)
			}
		}
	}
	for i := range out {
		out[i].EndOffset = Unbounded
		if i > 0 {
			out[i-1].EndOffset = out[i].StartOffset
		}
	}
	return out
}

// crashChild is the writer process: it opens dir and applies genOp's
// changes for ever, printing the number of each completed change.
func crashChild(dir, seedText, stepText string) int {
	seed, err := strconv.ParseUint(seedText, 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad seed:", err)
		return 2
	}
	current := 0
	if stepText != "" {
		var step, at int
		if _, err := fmt.Sscanf(stepText, "%d:%d", &step, &at); err != nil {
			fmt.Fprintln(os.Stderr, "bad step:", err)
			return 2
		}
		crashHook = func(s int) {
			if s == step && current >= at {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		}
	}
	f, err := Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 2
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	for i := 1; ; i++ {
		current = i
		o := genOp(rng, f.Entries())
		if err := o.apply(f); err != nil {
			fmt.Fprintf(os.Stderr, "op %d %+v: %v\n", i, o, err)
			return 2
		}
		if _, err := fmt.Fprintf(os.Stdout, "%d\n", i); err != nil {
			return 2
		}
	}
}

// crashRound runs one writer on dir until it dies: killed by the parent
// after killAfter completed changes (killAfter > 0), or by itself at a
// persist step (step != ""). It returns the number of completed changes.
func crashRound(t *testing.T, dir string, seed uint64, killAfter int, step string) int {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, crashSeedEnv+"="+strconv.FormatUint(seed, 10), crashStepEnv+"="+step)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A self-killing writer that never reaches its step (no such write
	// within this many changes) is killed and reported.
	limit := killAfter
	if limit <= 0 {
		limit = 2000
	}
	sc := bufio.NewScanner(out)
	done := 0
	for done < limit && sc.Scan() {
		done++
	}
	if done == limit {
		cmd.Process.Signal(syscall.SIGKILL)
	}
	for sc.Scan() {
	}
	waitErr := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(waitErr, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("writer ended with %v, not SIGKILL; stderr: %s", waitErr, stderr.String())
	}
	if killAfter > 0 && done < killAfter {
		t.Fatalf("writer died after %d changes, before the kill; stderr: %s", done, stderr.String())
	}
	if killAfter <= 0 && done == limit {
		t.Fatalf("writer never reached crash step %s in %d changes", step, limit)
	}
	return done
}

// replay returns the model's list after each of the first n changes of
// the writer seeded with seed, starting from before; states[0] = before.
func replay(before []Entry, seed uint64, n int) [][]Entry {
	rng := rand.New(rand.NewPCG(seed, 0))
	states := [][]Entry{before}
	for j := 1; j <= n; j++ {
		prev := states[j-1]
		states = append(states, genOp(rng, prev).model(prev))
	}
	return states
}

func reopen(t *testing.T, dir string) *File {
	t.Helper()
	g, err := Open(dir)
	if err != nil {
		t.Fatalf("reopen after kill -9: %v", err)
	}
	if _, err := Decode(Encode(g.Entries())); err != nil {
		t.Fatalf("reopened list invalid: %v", err)
	}
	return g
}

// TestCrashSafety kills (SIGKILL) a writer process at random moments,
// several rounds on the same directory: every reopen gives, without error,
// exactly the list after some change the writer had started, never a mix.
func TestCrashSafety(t *testing.T) {
	rounds := 8
	if testing.Short() {
		rounds = 3
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
	for round := 0; round < rounds; round++ {
		before := open(t, dir).Entries()
		seed := rng.Uint64()
		done := crashRound(t, dir, seed, 1+rng.IntN(40), "")
		g := reopen(t, dir)
		got := g.Entries()
		// The files must hold the list after change j for some j >= done
		// (the writer may have finished more before the signal landed).
		states := replay(before, seed, done+1000)
		matched := -1
		for j := done; j < len(states); j++ {
			if sameList(states[j], got) {
				matched = j
				break
			}
		}
		if matched < 0 {
			t.Fatalf("round %d: killed after change %d: reopened list %+v is no state the writer passed through", round, done, got)
		}
		t.Logf("round %d: killed after change %d, files hold change %d (%d entries, from %s)", round, done, matched, len(got), g.Recovery().Source)
	}
}

// TestCrashAtEveryStep makes the writer kill itself at each step of a
// write in turn: before the new file is in place the old list must read
// back, after it the new one, exactly.
func TestCrashAtEveryStep(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 2))
	for round := 0; round < 2; round++ {
		for step := 1; step <= numSteps; step++ {
			before := open(t, dir).Entries()
			seed := rng.Uint64()
			at := 1 + rng.IntN(20)
			done := crashRound(t, dir, seed, 0, fmt.Sprintf("%d:%d", step, at))
			g := reopen(t, dir)
			states := replay(before, seed, done+1)
			wantState := states[done+1]
			if step < stepInstalled {
				wantState = states[done]
			}
			if got := g.Entries(); !sameList(got, wantState) {
				t.Fatalf("step %d, killed in change %d: reopened %+v, want %+v", step, done+1, got, wantState)
			}
			t.Logf("step %d: killed in change %d, %d entries, from %s", step, done+1, g.Len(), g.Recovery().Source)
		}
	}
}

func sameList(a, b []Entry) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}
