package metadata

import (
	"cmp"
	"time"
)

// DataVersion is RocketMQ's DataVersion: the version of one metadata
// document. The zero value is the version of a document that never had one
// (a RocketMQ 4.x consumerOffset.json).
type DataVersion struct {
	// StateVersion is 0, or the master epoch in RocketMQ's controller mode.
	StateVersion int64 `json:"stateVersion"`
	// Timestamp is the time of the last change in Unix milliseconds.
	Timestamp int64 `json:"timestamp"`
	// Counter counts changes; it starts at 0.
	Counter int64 `json:"counter"`
}

// Next returns the version after v, as RocketMQ's nextVersion: Timestamp
// becomes now (Unix milliseconds) and Counter is incremented.
func (v DataVersion) Next(now time.Time) DataVersion {
	return DataVersion{StateVersion: v.StateVersion, Timestamp: now.UnixMilli(), Counter: v.Counter + 1}
}

// Equal reports whether all three fields are equal (RocketMQ's equals).
func (v DataVersion) Equal(o DataVersion) bool { return v == o }

// Compare orders versions as RocketMQ's compare: by StateVersion, then
// Counter, then Timestamp. It returns -1, 0 or +1.
func (v DataVersion) Compare(o DataVersion) int {
	if c := cmp.Compare(v.StateVersion, o.StateVersion); c != 0 {
		return c
	}
	if c := cmp.Compare(v.Counter, o.Counter); c != 0 {
		return c
	}
	return cmp.Compare(v.Timestamp, o.Timestamp)
}

// Clock is the time source of the store (version timestamps) and the syncer
// (its ticker and the last-sync metric). Tests inject a fake.
type Clock interface {
	Now() time.Time
	NewTicker(d time.Duration) Ticker
}

// Ticker is the part of *time.Ticker the syncer uses.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// SystemClock returns the Clock backed by package time.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTicker(d time.Duration) Ticker { return sysTicker{time.NewTicker(d)} }

type sysTicker struct{ t *time.Ticker }

func (t sysTicker) C() <-chan time.Time { return t.t.C }
func (t sysTicker) Stop()               { t.t.Stop() }
