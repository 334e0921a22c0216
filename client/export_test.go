package client

import "time"

// WithIdleTimer replaces the idle timer of the producer's streams: newTimer
// returns the timer's channel and its stop function.
func WithIdleTimer(newTimer func(time.Duration) (<-chan time.Time, func() bool)) Option {
	return func(o *options) { o.newTimer = newTimer }
}
