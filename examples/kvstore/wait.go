package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// waitOpts are the wait flags of status: conditions to wait for (at most
// --timeout) before printing the status, so that a script can start nodes
// in the background and go on without sleeping.
type waitOpts struct {
	ready     bool   // the node answers /v1/status
	connected bool   // follower: connected to the leader; leader: a follower connected
	caughtUp  string // this node has applied what the node at this address holds
}

func (w waitOpts) any() bool { return w.ready || w.connected || w.caughtUp != "" }

// waitPoll is how often status polls while it waits.
const waitPoll = 50 * time.Millisecond

// fetchStatus GETs a node's status.
func fetchStatus(ctx context.Context, hc *http.Client, addr string) (statusResult, error) {
	var st statusResult
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return st, err
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s: HTTP %d", addr, resp.StatusCode)
	}
	return st, json.Unmarshal(body, &st)
}

// wait polls until every condition of w holds or timeout passes; it then
// says what it last saw.
func (c client) wait(w waitOpts) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	hc := &http.Client{Timeout: c.timeout}
	start := time.Now()
	var target int64 = -1
	last := ""
	t := time.NewTicker(waitPoll)
	defer t.Stop()
	for {
		why := ""
		if w.caughtUp != "" && target < 0 {
			if st, err := fetchStatus(ctx, hc, w.caughtUp); err != nil {
				why = "the leader: " + err.Error()
			} else {
				target = st.MaxOffset
			}
		}
		if why == "" {
			st, err := fetchStatus(ctx, hc, c.addr)
			switch {
			case err != nil:
				why = err.Error()
			case w.connected && st.Role == "follower" && !st.Connected:
				why = "not connected to the leader " + st.Leader
				if st.LastError != "" {
					why += ": " + st.LastError
				}
			case w.connected && st.Role == "leader" && st.Followers == 0:
				why = "no follower connected"
			case target >= 0 && st.AppliedOffset < target:
				why = fmt.Sprintf("applied offset %d, waiting for %d", st.AppliedOffset, target)
			}
		}
		if why == "" {
			return nil
		}
		if ctx.Err() != nil && last != "" {
			why = last
		}
		last = why
		select {
		case <-ctx.Done():
			return fmt.Errorf("status: gave up after %s: %s", time.Since(start).Round(time.Millisecond), why)
		case <-t.C:
		}
	}
}
