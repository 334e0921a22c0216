package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/replicatorhq/replicator/internal/api"
)

// A classic slave whose log is longer than (diverged from) its master's gets
// heartbeats only, forever: the classic wire cannot tell it, since the
// master's heartbeats carry the slave's own offset. The slave node finds out
// through the master's API (--master-api): while connected and appending
// nothing for a report interval, it reads the master's GET /v1/status at
// most once per interval and compares max offsets.

// defaultBehindInterval is the check interval when Config.HAReportInterval
// is 0 (core's default report interval).
const defaultBehindInterval = 5 * time.Second

// behindCheck is a classic slave's master-log check.
type behindCheck struct {
	interval time.Duration
	client   *http.Client
	url      string // the master's GET /v1/status

	// Owned by the check goroutine.
	lastMax int64
}

func newBehindGauge() prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "replicator_node_master_behind",
		Help: "Classic slave with --master-api: 1 while the master's log ends below this slave's max offset (this log is longer or diverged; the master sends heartbeats only), else 0.",
	})
}

// diverged is the current reason ("" when the check found nothing).
func (n *Node) diverged() string {
	n.behindMu.Lock()
	defer n.behindMu.Unlock()
	return n.behind
}

// setDiverged records reason ("" clears it) and logs each change;
// masterMax is -1 when data arrived rather than the master's API answered.
func (n *Node) setDiverged(reason string, masterMax, localMax int64) {
	n.behindMu.Lock()
	was := n.behind
	n.behind = reason
	n.behindMu.Unlock()
	args := []any{"master", n.cfg.MasterHA, "master_api", n.cfg.MasterAPI, "max_offset", localMax}
	if masterMax >= 0 {
		args = append(args, "master_max_offset", masterMax)
	}
	switch {
	case reason != "" && was == "":
		n.behindGauge.Set(1)
		n.log.Error("classic slave receives heartbeats only: "+reason, args...)
	case reason == "" && was != "":
		n.behindGauge.Set(0)
		n.log.Info("the master's log is no longer shorter than this slave's: replicating again", args...)
	}
}

// startBehindCheck starts the check on a classic slave node, or logs that it
// is off without --master-api.
func (n *Node) startBehindCheck() {
	if n.cfg.MasterAPI == "" {
		n.log.Info("the master-log check is off: without --master-api this classic slave cannot tell a log longer than (diverged from) its master's, which gets heartbeats only")
		return
	}
	interval := n.cfg.HAReportInterval
	if interval <= 0 {
		interval = defaultBehindInterval
	}
	client := n.cfg.MasterAPIClient
	if client == nil {
		client = &http.Client{Timeout: interval}
	}
	c := &behindCheck{interval: interval, client: client, url: strings.TrimRight(n.cfg.MasterAPI, "/") + "/v1/status"}
	n.stopBehind, n.behindDone = make(chan struct{}), make(chan struct{})
	go n.runBehindCheck(c)
}

// runBehindCheck is the check's goroutine. Appends are pushed by the store
// (store.Store.Watch), at most one wake-up per interval; a timer fires one
// interval after the last append seen or the last check, and the master's
// status is read then if nothing was appended in between.
func (n *Node) runBehindCheck(c *behindCheck) {
	defer close(n.behindDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-n.stopBehind:
			cancel()
		case <-ctx.Done():
		}
	}()
	appended := make(chan struct{}, 1)
	stopWatch := n.st.Watch(appended)
	defer stopWatch()
	t := time.NewTimer(c.interval)
	defer t.Stop()
	c.lastMax = n.st.Bounds().Max
	// watch is appended until the first append after a tick, then nil until
	// the next tick: a catch-up appends a frame every few microseconds, and
	// one wake-up per interval is all the check needs.
	watch := appended
	for {
		select {
		case <-n.stopBehind:
			return
		case <-watch:
			watch = nil
			if local := n.st.Bounds().Max; local != c.lastMax {
				// Data arrived: the slave appends, the master's log
				// reaches past this one.
				c.lastMax = local
				n.setDiverged("", -1, local)
				t.Reset(c.interval)
			}
			continue
		case <-t.C:
		}
		watch = appended
		t.Reset(c.interval)
		local := n.st.Bounds().Max
		if local != c.lastMax {
			// Appends since the last look: not an interval of heartbeats only.
			c.lastMax = local
			n.setDiverged("", -1, local)
			continue
		}
		// Check only while heartbeats only (connected, appending nothing
		// for an interval), or while the reason is up so that it clears.
		if n.diverged() == "" && !n.slave.Status().Connected {
			continue
		}
		masterMax, err := c.masterMax(ctx)
		if err != nil {
			if ctx.Err() == nil {
				n.log.Debug("reading the master's status for the master-log check", "url", c.url, "error", err)
			}
			continue
		}
		if masterMax < local {
			n.setDiverged(fmt.Sprintf("the master's log ends at %d, this slave's at %d: it is longer or diverged; re-seed this slave or use --ha-protocol autoswitch",
				masterMax, local), masterMax, local)
		} else {
			n.setDiverged("", masterMax, local)
		}
	}
}

// masterMax reads the master's max offset from its API.
func (c *behindCheck) masterMax(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, c.interval)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return 0, fmt.Errorf("GET %s: %s", c.url, resp.Status)
	}
	var st api.Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
		return 0, fmt.Errorf("GET %s: %w", c.url, err)
	}
	if st.Master != nil {
		return 0, fmt.Errorf("GET %s: the node is a slave (role %s), not a master", c.url, st.Role)
	}
	return st.MaxOffset, nil
}
