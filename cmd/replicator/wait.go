package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/config"
)

// statusWait are the --wait-* options of status: conditions to wait for
// (at most --timeout) before printing the status, so that scripts need no
// sleeps.
type statusWait struct {
	Ready     bool   // /readyz answers 200
	Following bool   // /readyz?following answers 200 (a slave connected to its master)
	Offset    int64  // max offset at least this (0: no wait)
	CaughtUp  string // max offset at least that of this node's (the master's) max offset when the wait starts
}

func (w *statusWait) any() bool { return w.Ready || w.Following || w.Offset > 0 || w.CaughtUp != "" }

// waitPoll is how often status polls while it waits.
const waitPoll = 50 * time.Millisecond

func statusWaitOpts(w *statusWait) []*config.Option {
	return []*config.Option{
		{Name: "wait-ready", Help: "first wait, at most --timeout, until the node is ready (/readyz answers 200: started, not shutting down, disk not full)", Value: config.Bool(&w.Ready)},
		{Name: "wait-following", Help: "first wait, at most --timeout, until the node (a slave) follows a live master (/readyz?following answers 200)", Value: config.Bool(&w.Following)},
		{Name: "wait-offset", Meta: "OFFSET", Help: "first wait, at most --timeout, until the node's max offset is at least OFFSET (0: no wait)", Default: "0", Value: config.Int64(&w.Offset, 0, math.MaxInt64)},
		{Name: "wait-caught-up", Meta: "URL", Help: "first wait, at most --timeout, until the node's max offset reaches the max offset the node at URL (its master) has when the wait starts", Value: config.URL(&w.CaughtUp, true)},
	}
}

// errNotYet is a wait condition that does not hold yet.
var errNotYet = errors.New("not yet")

// waitStatus polls the node behind c until every condition of w holds or
// timeout passes; connection errors count as "not yet" (the node may be
// starting).
func (e *env) waitStatus(ctx context.Context, c *client, w statusWait, sec clientSecurity, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	target := w.Offset
	if w.CaughtUp != "" {
		mc, err := e.newSecureClient(sec, w.CaughtUp, timeout)
		if err != nil {
			return usage(fmt.Errorf("--wait-caught-up: %w", err))
		}
		var st api.Status
		err = poll(ctx, func() (string, error) {
			var err error
			st, err = mc.status(ctx)
			if err != nil {
				return "the master at " + w.CaughtUp + ": " + err.Error(), errNotYet
			}
			return "", nil
		})
		if err != nil {
			return fmt.Errorf("--wait-caught-up: %w", err)
		}
		target = max(target, st.MaxOffset)
	}
	return poll(ctx, func() (string, error) {
		if w.Ready || w.Following {
			path := "/readyz"
			if w.Following {
				path = "/readyz?following"
			}
			code, body, err := c.getRaw(ctx, path)
			if err != nil {
				return err.Error(), errNotYet
			}
			if code != http.StatusOK {
				var ra api.ReadyAnswer
				_ = json.Unmarshal(body, &ra)
				why := fmt.Sprintf("%s answers %d %s", path, code, ra.Status)
				if ra.Error != "" {
					why += ": " + ra.Error
				}
				return why, errNotYet
			}
		}
		if target > 0 {
			st, err := c.status(ctx)
			if err != nil {
				return err.Error(), errNotYet
			}
			if st.MaxOffset < target {
				return fmt.Sprintf("max offset %d, waiting for %d", st.MaxOffset, target), errNotYet
			}
		}
		return "", nil
	})
}

// poll runs check every waitPoll until it returns nil, a hard error, or ctx
// ends; the error then says what was last seen.
func poll(ctx context.Context, check func() (string, error)) error {
	t := time.NewTicker(waitPoll)
	defer t.Stop()
	start := time.Now()
	last := ""
	for {
		why, err := check()
		if err == nil {
			return nil
		}
		if !errors.Is(err, errNotYet) {
			return err
		}
		if ctx.Err() != nil && last != "" {
			why = last // the check cut short by the deadline says nothing
		}
		last = why
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up after %s: %s", time.Since(start).Round(time.Millisecond), why)
		case <-t.C:
		}
	}
}

// getRaw GETs path and returns the status code and body, whatever the code.
func (c *client) getRaw(ctx context.Context, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}
