package metadata

import "time"

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
