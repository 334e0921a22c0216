package side

import (
	"context"
	"net"
)

// AcceptDuring accepts the plugin's connection while call asks the plugin to
// dial in (the host's side of every side channel set-up): the accept runs
// until call returns and, when call succeeded, until the plugin connects or
// ctx ends. A failed call stops the accept and closes a connection accepted
// anyway. callErr is call's error, acceptErr the accept's (when call
// succeeded); c is set when both are nil.
func (l *Listener) AcceptDuring(ctx context.Context, call func(context.Context) error) (c *net.UnixConn, callErr, acceptErr error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	type accepted struct {
		c   *net.UnixConn
		err error
	}
	got := make(chan accepted, 1)
	go func() {
		uc, err := l.Accept(actx)
		got <- accepted{uc, err}
	}()
	callErr = call(ctx)
	if callErr != nil {
		cancel()
	}
	a := <-got
	if callErr != nil {
		if a.c != nil {
			a.c.Close()
		}
		return nil, callErr, nil
	}
	return a.c, nil, a.err
}
