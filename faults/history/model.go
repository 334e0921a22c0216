package history

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/anishathalye/porcupine"
)

// appendIn is an append's input, appendOut its output.
type appendIn struct{ key string }

type appendOut struct {
	outcome      Outcome
	offset, next int64
}

// readIn is the final read's input, readOut its output (the number of
// records; the records are the model's reference, see Model).
type readIn struct{}

type readOut struct{ records int }

// Model is the append-only log as porcupine's sequential specification,
// with the final log as the reference that resolves an Unknown append
// (see the package documentation). The state is the number of records
// appended so far, that is the index in the final log of the next one
// (an offset would do as well but for the gap an end-of-segment filler
// leaves).
func Model(final Log) porcupine.Model { return modelFrom(final, 0) }

// modelFrom is Model starting with init records appended.
func modelFrom(final Log, init int) porcupine.Model {
	at := make(map[int64]int, len(final.Records))
	byKey := make(map[string]int, len(final.Records))
	for i, r := range final.Records {
		at[r.Offset] = i
		if _, dup := byKey[r.Key]; !dup {
			byKey[r.Key] = i
		}
	}
	return porcupine.Model{
		Init: func() any { return init },
		Step: func(state, input, output any) (bool, any) {
			n := state.(int)
			switch in := input.(type) {
			case readIn:
				return n == output.(readOut).records, n
			case appendIn:
				out := output.(appendOut)
				switch out.outcome {
				case OK:
					i, ok := at[out.offset]
					if !ok || n != i || final.Records[i].Key != in.key || final.Records[i].Next != out.next {
						return false, n
					}
					return true, n + 1
				case Unknown:
					i, ok := byKey[in.key]
					if !ok {
						return true, n
					}
					return n == i, i + 1
				case Failed:
					_, ok := byKey[in.key]
					return !ok, n
				}
			}
			panic(fmt.Sprintf("history: unexpected operation %#v -> %#v", input, output))
		},
		Equal: func(a, b any) bool { return a.(int) == b.(int) },
		DescribeOperation: func(input, output any) string {
			switch in := input.(type) {
			case readIn:
				return fmt.Sprintf("read() -> %d records", output.(readOut).records)
			case appendIn:
				out := output.(appendOut)
				if out.outcome == OK {
					return fmt.Sprintf("append(%s) -> %d", in.key, out.offset)
				}
				return fmt.Sprintf("append(%s) -> %s", in.key, out.outcome)
			}
			return fmt.Sprintf("%v -> %v", input, output)
		},
		DescribeState: func(s any) string {
			n := s.(int)
			if n > 0 && n <= len(final.Records) {
				return fmt.Sprintf("%d records, last %s ending at %d", n, final.Records[n-1].Key, final.Records[n-1].Next)
			}
			return fmt.Sprintf("%d records", n)
		},
	}
}

// Operations converts a history and its final read into porcupine
// operations, in invocation order. Appends that did nothing in every
// linearization (Unknown or Failed puts whose message the final log does
// not hold) are left out: a no-op can be linearized anywhere. An Open
// Unknown put may take effect after its Return: its return becomes the
// earliest return of a put answered later whose message lies after its
// own in the final log (it must take effect before that one), or after
// every other event when there is none.
func Operations(ops []Op, final Read) []porcupine.Operation {
	byKey := make(map[string]int, len(final.Log.Records))
	for i, r := range final.Log.Records {
		byKey[r.Key] = i
	}
	last := final.Return
	clients := 0
	for _, o := range ops {
		last = max(last, o.Return, o.Call)
		clients = max(clients, o.Client+1)
	}
	// minRet[i]: the earliest return of a non-open effective put whose
	// message lies at index i or later.
	minRet := make([]int64, len(final.Log.Records)+1)
	for i := range minRet {
		minRet[i] = last + 1
	}
	for _, o := range ops {
		if i, ok := byKey[o.Key]; ok && !o.Open && o.Outcome != Failed {
			minRet[i] = min(minRet[i], o.Return)
		}
	}
	for i := len(minRet) - 2; i >= 0; i-- {
		minRet[i] = min(minRet[i], minRet[i+1])
	}
	out := make([]porcupine.Operation, 0, len(ops)+1)
	for _, o := range byCall(ops) {
		i, inLog := byKey[o.Key]
		if o.Outcome != OK && !inLog {
			continue
		}
		ret := o.Return
		if o.Open {
			ret = last + 1
			if inLog && minRet[i+1] >= o.Call {
				ret = minRet[i+1]
			}
		}
		out = append(out, porcupine.Operation{ClientId: o.Client, Input: appendIn{o.Key},
			Call: o.Call, Output: appendOut{o.Outcome, o.Offset, o.Next}, Return: ret})
	}
	return append(out, porcupine.Operation{ClientId: clients, Input: readIn{}, Call: final.Call,
		Output: readOut{len(final.Log.Records)}, Return: final.Return})
}

// maxVerbose bounds the chunks whose failed check is searched again for
// the visualization.
const maxVerbose = 20000

// Linearizability is the result of CheckLinearizable.
type Linearizability struct {
	Result string // "ok", "illegal" or "unknown" (timed out)
	Ops    int    // operations searched
	// Chunks: the history splits at instants when no operation is
	// pending; each chunk is searched from the state the chunks before it
	// end in (the number of appends that took effect in them).
	Chunks     int
	Took       time.Duration
	Violations []Violation
	model      porcupine.Model
	ops        []porcupine.Operation
	info       porcupine.LinearizationInfo
}

// chunk is a run of operations with no operation pending at its
// borders, and the number of records appended before it.
type chunk struct {
	ops  []porcupine.Operation
	init int
}

// chunks splits ops (in invocation order) where no operation is pending.
func chunks(ops []porcupine.Operation) []chunk {
	var out []chunk
	var cur chunk
	maxRet := int64(-1 << 63)
	effective := 0
	for _, o := range ops {
		if len(cur.ops) > 0 && o.Call > maxRet {
			out = append(out, cur)
			cur = chunk{init: effective}
		}
		cur.ops = append(cur.ops, o)
		maxRet = max(maxRet, o.Return)
		if _, ok := o.Input.(appendIn); ok {
			effective++ // every append left in takes effect, or none fits
		}
	}
	return append(out, cur)
}

// CheckLinearizable searches a linearization of ops and the final read
// with porcupine, for at most timeout in all (0: no bound).
func CheckLinearizable(ops []Op, final Read, timeout time.Duration) Linearizability {
	pops := Operations(ops, final)
	cs := chunks(pops)
	l := Linearizability{Ops: len(pops), Chunks: len(cs)}
	t0 := time.Now()
	res := porcupine.Ok
	failedAt := 0
	for _, c := range cs {
		left := time.Duration(0)
		if timeout > 0 {
			if left = timeout - time.Since(t0); left <= 0 {
				res = porcupine.Unknown
				break
			}
		}
		m := modelFrom(final.Log, c.init)
		if r := porcupine.CheckOperationsTimeout(m, c.ops, left); r != porcupine.Ok {
			res = r
			l.model, l.ops, failedAt = m, c.ops, c.init
			break
		}
	}
	l.Took = time.Since(t0)
	// The verbose search records partial linearizations at a cost
	// quadratic in the history's length: only a failed chunk runs it,
	// for the visualization.
	if res == porcupine.Illegal && len(l.ops) <= maxVerbose {
		_, l.info = porcupine.CheckOperationsVerbose(l.model, l.ops, timeout)
	}
	switch res {
	case porcupine.Ok:
		l.Result = "ok"
	case porcupine.Illegal:
		l.Result = "illegal"
		l.Violations = []Violation{{NotLinearizable, fmt.Sprintf("porcupine found no linearization of %d operations (a chunk of %d, from %d records on) and the final read (log end %d)%s",
			len(pops), len(l.ops), failedAt, final.Log.End, longestPartial(l.info))}}
	default:
		l.Result = "unknown"
		l.Violations = []Violation{{CheckTimeout, fmt.Sprintf("porcupine did not finish within %s (%d operations)", timeout, len(pops))}}
	}
	return l
}

// longestPartial describes where the longest partial linearization
// stops.
func longestPartial(info porcupine.LinearizationInfo) string {
	best := 0
	for _, part := range info.PartialLinearizations() {
		for _, p := range part {
			best = max(best, len(p))
		}
	}
	if best == 0 {
		return ""
	}
	return fmt.Sprintf("; the longest partial linearization has %d operations", best)
}

// Visualize writes porcupine's HTML view of the search (for a failed
// check).
func (l Linearizability) Visualize(w io.Writer) error {
	if l.Result == "" {
		return errors.New("history: no linearizability check ran")
	}
	return porcupine.Visualize(l.model, l.info, w)
}
