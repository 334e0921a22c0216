package backoff

import (
	"errors"
	"net"
	"time"
)

// The delays of an accept loop: net/http's Server uses the same.
const (
	Min = 5 * time.Millisecond
	Max = time.Second
)

// Backoff is the delay after failures in a row. The zero value is ready:
// its first Next is Min. Not safe for concurrent use (one loop owns it).
type Backoff struct{ d time.Duration }

// Next returns the delay after one more failure: Min after a success (or
// at first), then twice the last one, at most Max.
func (b *Backoff) Next() time.Duration {
	b.d = min(max(2*b.d, Min), Max)
	return b.d
}

// Reset starts again at Min (after a success).
func (b *Backoff) Reset() { b.d = 0 }

// Stopped reports whether an accept loop ends after Accept failed with
// err: done is closed (the owner is shutting down) or the listener is
// (net.ErrClosed). Any other error is transient: back off and go on.
func Stopped(err error, done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
	}
	return errors.Is(err, net.ErrClosed)
}

// Sleep waits d or until done is closed, and reports whether it waited the
// whole d (false: done closed first).
func Sleep(d time.Duration, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}
