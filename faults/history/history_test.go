package history

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// logOf builds a contiguous log of records of the given keys and sizes,
// from 0.
func logOf(keysAndSizes ...any) Log {
	var l Log
	for i := 0; i < len(keysAndSizes); i += 2 {
		k, n := keysAndSizes[i].(string), int64(keysAndSizes[i+1].(int))
		l.Records = append(l.Records, Record{Offset: l.End, Next: l.End + n, Key: k})
		l.End += n
	}
	return l
}

func ok(client int, key string, call, ret int64, off, next int64, epoch int32, broker int64) Op {
	return Op{Client: client, Key: key, Call: call, Return: ret, Outcome: OK, Offset: off, Next: next, Epoch: epoch, BrokerID: broker}
}

func unknown(client int, key string, call, ret int64, open bool) Op {
	return Op{Client: client, Key: key, Call: call, Return: ret, Outcome: Unknown, Open: open}
}

func failed(client int, key string, call, ret int64) Op {
	return Op{Client: client, Key: key, Call: call, Return: ret, Outcome: Failed}
}

func kinds(r Report) []Kind {
	var out []Kind
	for _, v := range r.Violations {
		if !slices.Contains(out, v.Kind) {
			out = append(out, v.Kind)
		}
	}
	slices.Sort(out)
	return out
}

func wantKinds(t *testing.T, r Report, want ...Kind) {
	t.Helper()
	slices.Sort(want)
	if got := kinds(r); !slices.Equal(got, want) {
		t.Fatalf("violations %v, want kinds %v:\n%v", got, want, r.Violations)
	}
}

// A history with every outcome, concurrency, a failover (a new epoch and
// broker) and unknown puts that did and did not take effect is accepted.
func TestCheckAcceptsValidHistory(t *testing.T) {
	final := logOf("a", 10, "b", 20, "u1", 5, "c", 7, "u2", 9, "d", 3)
	ops := []Op{
		ok(0, "a", 0, 10, 0, 10, 1, 1),
		ok(1, "b", 5, 12, 10, 30, 1, 1),
		unknown(2, "u1", 6, 40, false),    // stored, answered FLUSH_SLAVE_TIMEOUT, kept
		unknown(0, "lost1", 11, 41, true), // timed out, never stored
		failed(1, "f1", 13, 14),           // refused
		ok(1, "c", 50, 60, 35, 42, 2, 3),  // the new master
		unknown(0, "u2", 45, 46, true),    // timed out, yet stored after its return
		unknown(2, "cut", 41, 44, false),  // stored on the old master, cut
		ok(2, "d", 70, 80, 51, 54, 2, 3),  // after u2
		failed(0, "f2", 47, 48),           // 503 not stored
		unknown(1, "u3", 61, 62, false),   // not in the log
	}
	r := Check(ops, Read{Call: 100, Return: 110, Log: final}, 10*time.Second)
	if !r.OK() || r.Lin.Result != "ok" {
		t.Fatalf("valid history rejected: %v (%s)", r.Violations, r.Lin.Result)
	}
	if r.Counts != (Counts{OK: 4, Unknown: 5, Failed: 2}) || r.Epochs != 2 {
		t.Fatalf("counts %+v epochs %d", r.Counts, r.Epochs)
	}
	// u1 and u2 (the unknowns that took effect), the 4 OK puts and the
	// read are searched; the no-ops are not.
	if r.Lin.Ops != 7 {
		t.Fatalf("porcupine searched %d operations, want 7", r.Lin.Ops)
	}
}

// Each broken guarantee is reported, so the suite cannot pass vacuously.
func TestCheckRejectsBadHistories(t *testing.T) {
	read := func(l Log) Read { return Read{Call: 1000, Return: 1001, Log: l} }
	cases := []struct {
		name  string
		ops   []Op
		final Log
		want  []Kind
	}{
		{"an acknowledged put missing from the final log",
			[]Op{ok(0, "a", 0, 10, 0, 10, 1, 1), ok(1, "b", 20, 30, 10, 20, 1, 1)},
			logOf("a", 10), []Kind{Lost, NotLinearizable}},
		{"an acknowledged offset holding another message at the end",
			[]Op{ok(0, "a", 0, 10, 0, 10, 1, 1), unknown(1, "x", 0, 5, false)},
			logOf("x", 10), []Kind{Lost, NotLinearizable}},
		{"an acknowledged record ending elsewhere",
			[]Op{ok(0, "a", 0, 10, 0, 10, 1, 1)},
			logOf("a", 12), []Kind{Lost, NotLinearizable}},
		{"one offset acknowledged for two messages (old master, then new)",
			[]Op{ok(0, "a", 0, 10, 0, 10, 1, 1), ok(1, "b", 20, 30, 0, 10, 2, 2)},
			logOf("b", 10), []Kind{Lost, Overwritten, NotLinearizable}},
		{"two masters acknowledging in one epoch",
			[]Op{ok(0, "a", 0, 10, 0, 10, 1, 1), ok(1, "b", 20, 30, 10, 20, 1, 2)},
			logOf("a", 10, "b", 10), []Kind{SplitBrain}},
		{"a deposed master acknowledging after its successor did",
			[]Op{ok(0, "a", 0, 10, 0, 10, 2, 2), ok(1, "b", 20, 30, 10, 20, 1, 1)},
			logOf("a", 10, "b", 10), []Kind{StaleEpoch}},
		{"an acknowledgement without epoch",
			[]Op{ok(0, "a", 0, 10, 0, 10, 0, 1)},
			logOf("a", 10), []Kind{Unattributed}},
		{"a failed put that is stored after all",
			[]Op{ok(0, "a", 0, 10, 0, 10, 1, 1), failed(1, "f", 20, 30)},
			logOf("a", 10, "f", 5), []Kind{Resurrected, NotLinearizable}},
		{"a message twice in the log",
			[]Op{ok(0, "a", 0, 10, 0, 10, 1, 1), unknown(1, "u", 20, 30, false)},
			logOf("a", 10, "u", 5, "u", 5), []Kind{Duplicated, NotLinearizable}},
		{"a record nobody put",
			[]Op{ok(0, "a", 0, 10, 0, 10, 1, 1)},
			logOf("a", 10, "", 5), []Kind{Foreign, NotLinearizable}},
		{"a log with a hole",
			[]Op{ok(0, "a", 0, 10, 0, 10, 1, 1)},
			Log{End: 25, Records: []Record{{0, 10, "a"}, {15, 25, "b"}}}, []Kind{BadLog}},
		// Every direct check passes: only the real-time order is wrong. a
		// was acknowledged at 10 before b was invoked, so b cannot lie
		// before it.
		{"an acknowledged put placed before one acknowledged earlier",
			[]Op{ok(0, "a", 0, 10, 5, 15, 1, 1), ok(1, "b", 20, 30, 0, 5, 1, 1)},
			logOf("b", 5, "a", 10), []Kind{NotLinearizable}},
		// An unknown put invoked after a's acknowledgement lies before a.
		{"an unknown put before an acknowledgement that preceded it",
			[]Op{ok(0, "a", 0, 10, 5, 15, 1, 1), unknown(1, "u", 20, 30, true)},
			logOf("u", 5, "a", 10), []Kind{NotLinearizable}},
		// The final read happened after every put returned: an
		// acknowledged put that is not in the log read by then cannot be
		// linearized, even if the record sits at the right offset later
		// (here the read's log end says it is not there).
		{"a final read that misses an acknowledged put at its end",
			[]Op{ok(0, "a", 0, 10, 0, 10, 1, 1), ok(1, "b", 20, 30, 10, 20, 1, 1)},
			Log{End: 10, Records: []Record{{0, 10, "a"}}}, []Kind{Lost, NotLinearizable}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wantKinds(t, Check(c.ops, read(c.final), 10*time.Second), c.want...)
		})
	}
}

// The same history without the offending operation passes: the case
// above fails for the reason named, not for its shape.
func TestCheckRealTimeCaseIsMinimal(t *testing.T) {
	ops := []Op{ok(0, "a", 0, 10, 5, 15, 1, 1), ok(1, "b", 5, 30, 0, 5, 1, 1)} // concurrent now
	r := Check(ops, Read{Call: 1000, Return: 1001, Log: logOf("b", 5, "a", 10)}, 10*time.Second)
	if !r.OK() {
		t.Fatalf("concurrent puts in either order rejected: %v", r.Violations)
	}
}

// sim builds a random valid history: clients put messages concurrently;
// each put takes effect at a random instant of its interval (the server
// appends in order of those instants); some answers are lost (Open), some
// are not PUT_OK (Unknown, kept or cut), some are refused (Failed). The
// epoch changes every so often, with a new broker.
func sim(seed uint64, clients, puts int) ([]Op, Read) {
	rng := rand.New(rand.NewPCG(seed, 7))
	type pending struct {
		op  Op
		lin int64 // when it takes effect; -1: never
	}
	var all []pending
	next := make([]int64, clients)
	for i := range puts {
		c := rng.IntN(clients)
		call := next[c] + int64(rng.IntN(3))
		lin := call + 1 + int64(rng.IntN(10))
		ret := lin + 1 + int64(rng.IntN(10))
		next[c] = ret + 1
		op := Op{Client: c, Key: fmt.Sprintf("k%d", i), Call: call, Return: ret, Outcome: OK}
		switch x := rng.IntN(20); {
		case x == 0:
			op.Outcome, lin = Failed, -1
		case x == 1:
			op.Outcome, op.Open = Unknown, true
			lin = call + 1 + int64(rng.IntN(40)) // may land after its return
		case x == 2:
			op.Outcome, op.Open = Unknown, true
			lin = -1
		case x == 3:
			op.Outcome = Unknown // answered, kept
		case x == 4:
			op.Outcome, lin = Unknown, -1 // answered, cut
		}
		all = append(all, pending{op, lin})
	}
	slices.SortStableFunc(all, func(a, b pending) int { return int(a.lin - b.lin) })
	var l Log
	var epoch int32 = 1
	for i := range all {
		p := &all[i]
		if p.lin < 0 {
			continue
		}
		if rng.IntN(50) == 0 {
			epoch++
		}
		size := int64(50 + rng.IntN(500))
		p.op.Offset, p.op.Next, p.op.Epoch, p.op.BrokerID = l.End, l.End+size, epoch, int64(epoch%3)+1
		l.Records = append(l.Records, Record{Offset: l.End, Next: l.End + size, Key: p.op.Key})
		l.End += size
	}
	ops := make([]Op, len(all))
	last := int64(0)
	for i, p := range all {
		ops[i] = p.op
		last = max(last, p.op.Return, p.lin)
	}
	return ops, Read{Call: last + 1, Return: last + 2, Log: l}
}

// A long random history checks fast, and so does its rejection after one
// operation is moved in time (so a failed check in the suite does not
// hang on porcupine's search).
func TestCheckScales(t *testing.T) {
	ops, final := sim(1, 8, 5000)
	t0 := time.Now()
	r := Check(ops, final, time.Minute)
	if !r.OK() {
		t.Fatalf("valid simulated history rejected: %v", r.Violations[:min(3, len(r.Violations))])
	}
	t.Logf("5000 operations, 8 clients: %+v, epochs %d, porcupine searched %d in %d chunks in %s (check %s)", r.Counts, r.Epochs, r.Lin.Ops, r.Lin.Chunks, r.Lin.Took, time.Since(t0))
	if r.Counts.Unknown == 0 || r.Counts.Failed == 0 || r.Epochs < 2 {
		t.Fatalf("the simulation lacks outcomes: %+v epochs %d", r.Counts, r.Epochs)
	}

	// Move the OK put at the middle of the log to after the last one's
	// return: it is then acknowledged after a put that lies after it.
	mid := final.Log.Records[len(final.Log.Records)/2].Key
	lastRet := int64(0)
	for _, o := range ops {
		lastRet = max(lastRet, o.Return)
	}
	bad := slices.Clone(ops)
	moved := false
	for i := range bad {
		if bad[i].Key == mid && bad[i].Outcome == OK {
			bad[i].Call, bad[i].Return = lastRet+1, lastRet+2
			moved = true
		}
	}
	if !moved {
		t.Fatalf("the middle record %s is not an OK put", mid)
	}
	final.Call, final.Return = lastRet+3, lastRet+4
	t0 = time.Now()
	r = Check(bad, final, time.Minute)
	// It was also acknowledged in an older epoch than puts that returned
	// before it was invoked.
	wantKinds(t, r, NotLinearizable, StaleEpoch)
	t.Logf("rejected in %s", time.Since(t0))
}

func TestRecorderConcurrent(t *testing.T) {
	rec := NewRecorder()
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Go(func() {
			for i := range 100 {
				call := rec.Now()
				rec.Add(Op{Client: c, Key: fmt.Sprintf("c%d-%d", c, i), Call: call, Return: rec.Now(), Outcome: Outcome(i % 3)})
			}
		})
	}
	wg.Wait()
	ops := rec.Ops()
	if got := Count(ops); got != (Counts{OK: 136, Unknown: 132, Failed: 132}) {
		t.Fatalf("counts %+v", got)
	}
	for _, o := range ops {
		if o.Return < o.Call {
			t.Fatalf("clock went back: %v", o)
		}
	}
}

func TestVisualizeFailedCheck(t *testing.T) {
	l := CheckLinearizable([]Op{ok(0, "a", 0, 10, 5, 15, 1, 1), ok(1, "b", 20, 30, 0, 5, 1, 1)},
		Read{Call: 40, Return: 50, Log: logOf("b", 5, "a", 10)}, 10*time.Second)
	if l.Result != "illegal" {
		t.Fatalf("result %s", l.Result)
	}
	var b bytes.Buffer
	if err := l.Visualize(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "append(a)") {
		t.Fatalf("visualization lacks the operations (%d bytes)", b.Len())
	}
}

// Records skip the end-of-segment filler: the log is still contiguous,
// and a hole elsewhere is not.
func TestLogSegmentFiller(t *testing.T) {
	l := Log{SegmentSize: 100, End: 230, Records: []Record{{0, 60, "a"}, {60, 95, "b"}, {100, 180, "c"}, {180, 230, "d"}}}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	ops := []Op{ok(0, "a", 0, 1, 0, 60, 1, 1), ok(0, "b", 2, 3, 60, 95, 1, 1), ok(1, "c", 4, 5, 100, 180, 1, 1), unknown(2, "d", 0, 9, true)}
	if r := Check(ops, Read{Call: 10, Return: 11, Log: l}, 10*time.Second); !r.OK() {
		t.Fatalf("%v", r.Violations)
	}
	l.Records[2].Offset = 99 // not a segment boundary
	if err := l.Validate(); err == nil {
		t.Fatal("a hole before 99 passed")
	}
	l.Records[2].Offset, l.End = 100, 300 // a filler to the end of the last segment
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	l.End = 400 // past a whole segment
	if err := l.Validate(); err == nil {
		t.Fatal("an end 170 bytes past the last record passed")
	}
}

// The history splits where no operation is pending; an open put that lies
// before an answered one ends by that one's return, which lets it split.
func TestChunks(t *testing.T) {
	final := logOf("a", 10, "u", 5, "b", 10, "c", 10)
	ops := []Op{
		ok(0, "a", 0, 10, 0, 10, 1, 1),
		unknown(1, "u", 5, 6, true), // lies before b: ends by b's return
		ok(0, "b", 20, 30, 15, 25, 1, 1),
		ok(1, "c", 40, 50, 25, 35, 1, 1),
	}
	l := CheckLinearizable(ops, Read{Call: 60, Return: 61, Log: final}, 10*time.Second)
	if l.Result != "ok" || l.Chunks != 3 || l.Ops != 5 {
		t.Fatalf("result %s, %d chunks, %d ops: want ok, 3 ([a u b] does not split; c; read), 5", l.Result, l.Chunks, l.Ops)
	}
	// The same with c lost in the last chunk: the failing chunk is found.
	l = CheckLinearizable(ops, Read{Call: 60, Return: 61, Log: logOf("a", 10, "u", 5, "b", 10)}, 10*time.Second)
	if l.Result != "illegal" {
		t.Fatalf("result %s", l.Result)
	}
}
