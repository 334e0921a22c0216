package history

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// Outcome is what a producer knows about a put once it returned.
type Outcome int

const (
	// OK is PUT_OK: stored at [Op.Offset, Op.Next).
	OK Outcome = iota
	// Unknown: the put may or may not be stored.
	Unknown
	// Failed: the put is definitely not stored.
	Failed
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Unknown:
		return "unknown"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Op is one put as the producer saw it.
type Op struct {
	Client int
	// Key identifies the message; unique in a history.
	Key string
	// Call and Return are the invocation and completion times (Recorder
	// clock, nanoseconds).
	Call, Return int64
	Outcome      Outcome
	// Open: no answer came (timeout, broken connection): the put may take
	// effect after Return. Only for Unknown.
	Open bool
	// Offset and Next: where an OK message lies.
	Offset, Next int64
	// Epoch and BrokerID: the master epoch and the node that acknowledged
	// an OK put.
	Epoch    int32
	BrokerID int64
	// Detail is the answer or error, for reports.
	Detail string
}

func (o Op) String() string {
	s := fmt.Sprintf("put %s by client %d [%d, %d] %s", o.Key, o.Client, o.Call, o.Return, o.Outcome)
	if o.Outcome == OK {
		s += fmt.Sprintf(" at [%d, %d) epoch %d broker %d", o.Offset, o.Next, o.Epoch, o.BrokerID)
	}
	if o.Open {
		s += " (no answer)"
	}
	if o.Detail != "" {
		s += ": " + o.Detail
	}
	return s
}

// Recorder collects operations from concurrent producers on one monotonic
// clock.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []Op
}

// NewRecorder starts the clock.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Now is the recorder's clock: nanoseconds since NewRecorder, monotonic.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Add records a completed operation.
func (r *Recorder) Add(op Op) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// Ops returns a copy of the operations so far, in completion order.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// Counts are a history's operations by outcome.
type Counts struct {
	OK, Unknown, Failed int
}

// Count counts ops by outcome.
func Count(ops []Op) Counts {
	var c Counts
	for _, o := range ops {
		switch o.Outcome {
		case OK:
			c.OK++
		case Unknown:
			c.Unknown++
		case Failed:
			c.Failed++
		}
	}
	return c
}

// Record is one message of a node's log.
type Record struct {
	Offset, Next int64
	// Key is the message's key; "" for a record no producer of the test
	// wrote.
	Key string
}

// Log is a node's whole log, records in offset order, contiguous from
// Start to End but for the end-of-segment fillers.
type Log struct {
	Start, End int64
	// SegmentSize: a record that does not fit in the rest of a segment
	// starts the next one (the rest is a filler). 0: no segments.
	SegmentSize int64
	Records     []Record
}

// Validate checks that the records are contiguous from Start to End,
// but for a filler to the next segment boundary.
func (l Log) Validate() error {
	at := l.Start
	for i, r := range l.Records {
		if r.Next <= r.Offset || (r.Offset != at && !l.filler(at, r.Offset)) {
			return fmt.Errorf("history: record %d at [%d, %d), expected one at %d", i, r.Offset, r.Next, at)
		}
		at = r.Next
	}
	if at != l.End && !l.filler(at, l.End) {
		return fmt.Errorf("history: records end at %d, log end %d", at, l.End)
	}
	return nil
}

// filler reports whether [from, to) can be an end-of-segment filler.
func (l Log) filler(from, to int64) bool {
	return l.SegmentSize > 0 && to > from && to%l.SegmentSize == 0 && to-from < l.SegmentSize
}

// Read is the final read of the whole log: an operation of the history.
type Read struct {
	Call, Return int64
	Log          Log
}

// Kind names a class of violation.
type Kind string

// The violations Check finds.
const (
	Lost            Kind = "lost"
	Overwritten     Kind = "overwritten"
	SplitBrain      Kind = "split-brain"
	Resurrected     Kind = "resurrected"
	Duplicated      Kind = "duplicated"
	Foreign         Kind = "foreign"
	BadLog          Kind = "bad-log"
	StaleEpoch      Kind = "stale-epoch"
	Unattributed    Kind = "unattributed"
	NotLinearizable Kind = "not-linearizable"
	CheckTimeout    Kind = "check-timeout"
)

// Violation is one broken guarantee.
type Violation struct {
	Kind Kind
	Msg  string
}

func (v Violation) String() string { return string(v.Kind) + ": " + v.Msg }

// Report is the result of Check.
type Report struct {
	Counts     Counts
	Epochs     int // distinct epochs that acknowledged puts
	Violations []Violation
	// Lin is porcupine's verdict.
	Lin Linearizability
}

// OK reports whether no violation was found.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Check runs every check on ops and the final read; timeout bounds the
// linearizability search (0: none).
func Check(ops []Op, final Read, timeout time.Duration) Report {
	rep := Report{Counts: Count(ops)}
	if err := final.Log.Validate(); err != nil {
		rep.Violations = append(rep.Violations, Violation{BadLog, err.Error()})
		return rep
	}
	rep.Violations = append(rep.Violations, CheckAcked(ops, final.Log)...)
	rep.Violations = append(rep.Violations, CheckOffsets(ops)...)
	sb, epochs := CheckEpochs(ops)
	rep.Epochs = epochs
	rep.Violations = append(rep.Violations, sb...)
	rep.Violations = append(rep.Violations, CheckStaleEpochs(ops)...)
	rep.Violations = append(rep.Violations, CheckFinal(ops, final.Log)...)
	rep.Lin = CheckLinearizable(ops, final, timeout)
	rep.Violations = append(rep.Violations, rep.Lin.Violations...)
	return rep
}

// CheckAcked: every OK message is in the log at its offset and ends at its
// next offset.
func CheckAcked(ops []Op, l Log) []Violation {
	at := make(map[int64]Record, len(l.Records))
	for _, r := range l.Records {
		at[r.Offset] = r
	}
	var out []Violation
	for _, o := range ops {
		if o.Outcome != OK {
			continue
		}
		r, ok := at[o.Offset]
		switch {
		case !ok:
			out = append(out, Violation{Lost, fmt.Sprintf("%v: no record at offset %d in the final log [%d, %d)", o, o.Offset, l.Start, l.End)})
		case r.Key != o.Key:
			out = append(out, Violation{Lost, fmt.Sprintf("%v: offset %d holds %q in the final log", o, o.Offset, r.Key)})
		case r.Next != o.Next:
			out = append(out, Violation{Lost, fmt.Sprintf("%v: its record ends at %d in the final log", o, r.Next)})
		}
	}
	return out
}

// CheckOffsets: no offset was acknowledged for two different messages.
func CheckOffsets(ops []Op) []Violation {
	first := map[int64]Op{}
	var out []Violation
	for _, o := range byCall(ops) {
		if o.Outcome != OK {
			continue
		}
		if p, ok := first[o.Offset]; ok && p.Key != o.Key {
			out = append(out, Violation{Overwritten, fmt.Sprintf("offset %d acknowledged twice: %v and %v", o.Offset, p, o)})
			continue
		}
		first[o.Offset] = o
	}
	return out
}

// CheckEpochs: at most one broker id acknowledged puts in any epoch. It
// also returns the number of distinct epochs with acknowledged puts.
func CheckEpochs(ops []Op) ([]Violation, int) {
	by := map[int32]Op{}
	var out []Violation
	for _, o := range byCall(ops) {
		if o.Outcome != OK {
			continue
		}
		if p, ok := by[o.Epoch]; ok && p.BrokerID != o.BrokerID {
			out = append(out, Violation{SplitBrain, fmt.Sprintf("epoch %d acknowledged by brokers %d and %d: %v; %v", o.Epoch, p.BrokerID, o.BrokerID, p, o)})
			continue
		}
		if _, ok := by[o.Epoch]; !ok {
			by[o.Epoch] = o
		}
	}
	return out, len(by)
}

// CheckStaleEpochs: no put was acknowledged in an epoch older than one
// in which a put had already been acknowledged before it was invoked (a
// deposed master that still acknowledges), and every acknowledgement
// names its epoch and broker (else the split-brain check could not see
// anything).
func CheckStaleEpochs(ops []Op) []Violation {
	var oks []Op
	var out []Violation
	for _, o := range ops {
		if o.Outcome != OK {
			continue
		}
		if o.Epoch <= 0 || o.BrokerID <= 0 {
			out = append(out, Violation{Unattributed, fmt.Sprintf("%v: the answer names no epoch or broker", o)})
			continue
		}
		oks = append(oks, o)
	}
	sort.Slice(oks, func(i, j int) bool { return oks[i].Return < oks[j].Return })
	// best[i]: the OK op with the highest epoch among oks[:i+1].
	best := make([]Op, len(oks))
	for i, o := range oks {
		best[i] = o
		if i > 0 && best[i-1].Epoch >= o.Epoch {
			best[i] = best[i-1]
		}
	}
	for _, o := range oks {
		// The last op that returned before o was invoked.
		i := sort.Search(len(oks), func(i int) bool { return oks[i].Return >= o.Call }) - 1
		if i >= 0 && best[i].Epoch > o.Epoch {
			out = append(out, Violation{StaleEpoch, fmt.Sprintf("%v: invoked after %v had returned", o, best[i])})
		}
	}
	return out
}

// CheckFinal: the final log holds each key at most once, only keys of the
// history, and no message of a Failed put.
func CheckFinal(ops []Op, l Log) []Violation {
	byKey := make(map[string]Op, len(ops))
	for _, o := range ops {
		byKey[o.Key] = o
	}
	seen := make(map[string]int64, len(l.Records))
	var out []Violation
	for _, r := range l.Records {
		if p, ok := seen[r.Key]; ok {
			out = append(out, Violation{Duplicated, fmt.Sprintf("%q at offsets %d and %d", r.Key, p, r.Offset)})
			continue
		}
		seen[r.Key] = r.Offset
		o, ok := byKey[r.Key]
		switch {
		case !ok:
			out = append(out, Violation{Foreign, fmt.Sprintf("record at [%d, %d) key %q was put by no operation", r.Offset, r.Next, r.Key)})
		case o.Outcome == Failed:
			out = append(out, Violation{Resurrected, fmt.Sprintf("%v: yet at offset %d in the final log", o, r.Offset)})
		}
	}
	return out
}

// byCall returns ops sorted by invocation time (stable).
func byCall(ops []Op) []Op {
	s := append([]Op(nil), ops...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].Call < s[j].Call })
	return s
}
