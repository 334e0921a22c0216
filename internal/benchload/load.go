package benchload

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Put stores one message for producer p (0-based). It returns the offset
// just after the stored record and whether the put was PUT_OK; an error
// means the message may not be stored.
type Put func(ctx context.Context, p int) (next int64, ok bool, err error)

// Load describes a producer load for Drive.
type Load struct {
	// Producers is the number of concurrent producers (at least 1).
	Producers int
	// Puts stops the load after this many puts in total; 0 = no count limit.
	Puts int64
	// Duration stops the load after this long; 0 = no time limit. At least
	// one of Puts and Duration must be set.
	Duration time.Duration
	// OnPut, when set, is called by producer p after each put that
	// returned without error, with the record's next offset and the time
	// the put returned.
	OnPut func(p int, next int64, done time.Time)
}

// ErrBadLoad means a Load sets neither Puts nor Duration, or no producer.
var ErrBadLoad = errors.New("benchload: a load needs producers and a put count or a duration")

// Stats is the outcome of Drive.
type Stats struct {
	Puts     int64 // puts that returned without error (PUT_OK or not)
	NotOK    int64 // of those, puts whose status was not PUT_OK
	Errors   int64 // puts that returned an error
	FirstErr error // the first error (it stopped the load), or ErrBadLoad
	Elapsed  time.Duration
	// Latency holds one duration per put that returned without error,
	// sorted ascending.
	Latency []time.Duration
}

// MsgsPerSec is Puts per second of Elapsed.
func (s *Stats) MsgsPerSec() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Puts) / s.Elapsed.Seconds()
}

// Percentile returns the q-quantile (0 <= q <= 1) of the latencies, 0 when
// there are none.
func (s *Stats) Percentile(q float64) time.Duration {
	return Percentile(s.Latency, q)
}

// Percentile returns the q-quantile of sorted (ascending) durations, 0 for
// an empty slice.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)))
	return sorted[max(0, min(len(sorted)-1, i))]
}

// Drive runs l with put and returns what it measured. The first error
// stops every producer (in-flight puts finish); ctx's end stops them too.
func Drive(ctx context.Context, l Load, put Put) Stats {
	if l.Producers < 1 || (l.Puts <= 0 && l.Duration <= 0) {
		return Stats{FirstErr: ErrBadLoad}
	}
	var stop atomic.Bool
	var next, puts, notOK, errs atomic.Int64
	var firstErr error
	var errOnce sync.Once
	lat := make([][]time.Duration, l.Producers)
	start := time.Now()
	if l.Duration > 0 {
		t := time.AfterFunc(l.Duration, func() { stop.Store(true) })
		defer t.Stop()
	}
	var wg sync.WaitGroup
	for p := range l.Producers {
		wg.Go(func() {
			for !stop.Load() && ctx.Err() == nil {
				if l.Puts > 0 && next.Add(1) > l.Puts {
					return
				}
				t0 := time.Now()
				n, ok, err := put(ctx, p)
				done := time.Now()
				if err != nil {
					errs.Add(1)
					errOnce.Do(func() { firstErr = err })
					stop.Store(true)
					return
				}
				lat[p] = append(lat[p], done.Sub(t0))
				puts.Add(1)
				if !ok {
					notOK.Add(1)
				}
				if l.OnPut != nil {
					l.OnPut(p, n, done)
				}
			}
		})
	}
	wg.Wait()
	st := Stats{Puts: puts.Load(), NotOK: notOK.Load(), Errors: errs.Load(), FirstErr: firstErr, Elapsed: time.Since(start)}
	if st.FirstErr == nil && ctx.Err() != nil {
		st.FirstErr = ctx.Err()
	}
	st.Latency = slices.Concat(lat...)
	slices.Sort(st.Latency)
	return st
}
