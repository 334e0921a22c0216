package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/replicatorhq/replicator/internal/childproc"
)

// Child process timings.
const (
	childStartTimeout = 60 * time.Second // /readyz, and the slave connecting
	childStopTimeout  = 30 * time.Second // exit after SIGTERM
	childPoll         = 10 * time.Millisecond
)

// child is a replicator node (or a peer's server) started by the bench.
type child struct {
	*childproc.Proc
	api string // http://host:port ("" for a peer)
}

// startChild runs exe with args, its output in logPath (truncated). The
// child gets no REPLICATOR_* variables: its settings are the bench's flags
// only.
func startChild(exe, name, logPath, api string, args ...string) (*child, error) {
	p, err := childproc.Start(childproc.Config{Exe: exe, Args: args, Name: name, Log: logPath})
	if err != nil {
		return nil, err
	}
	return &child{Proc: p, api: api}, nil
}

// stop sends SIGTERM and waits for the exit (SIGKILL after
// childStopTimeout). It returns an error unless the child exited 0.
func (c *child) stop() error { return c.Stop(childStopTimeout) }

// waitReady polls /readyz until 200.
func (c *child) waitReady(ctx context.Context, hc *http.Client) error {
	return c.WaitReady(ctx, hc, c.api, childStartTimeout, childPoll)
}

// apiClient calls a node's HTTP API.
type apiClient struct {
	base string
	hc   *http.Client
	urls []string // put URLs, one per queue
}

// queues is how many queues the producers spread over.
const queues = 8

func newAPIClient(base string, conns int) *apiClient {
	tr := &http.Transport{
		Proxy:               nil,
		MaxIdleConns:        conns + 8,
		MaxIdleConnsPerHost: conns + 8,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}
	c := &apiClient{base: base, hc: &http.Client{Transport: tr, Timeout: time.Minute}}
	for q := range queues {
		c.urls = append(c.urls, base+"/v1/topics/TopicBench/messages?queue="+strconv.Itoa(q))
	}
	return c
}

func (c *apiClient) close() { c.hc.CloseIdleConnections() }

// put posts body as a message on queue p%queues; it returns the next
// offset and whether the status was PUT_OK.
func (c *apiClient) put(ctx context.Context, p int, body []byte) (int64, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.urls[p%queues], bytes.NewReader(body))
	if err != nil {
		return 0, false, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, false, fmt.Errorf("put: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return 0, false, fmt.Errorf("put: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("put: %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	var ans struct {
		Status     string `json:"status"`
		NextOffset int64  `json:"next_offset"`
	}
	if err := json.Unmarshal(b, &ans); err != nil {
		return 0, false, fmt.Errorf("put: decoding the answer: %w", err)
	}
	return ans.NextOffset, ans.Status == "PUT_OK", nil
}

// nodeStatus is the part of GET /v1/status the bench reads.
type nodeStatus struct {
	MaxOffset int64 `json:"max_offset"`
	Slaves    []struct {
		AckOffset int64 `json:"ack_offset"`
	} `json:"slaves"`
	Master *struct {
		Connected    bool   `json:"connected"`
		SegmentError string `json:"segment_error"`
	} `json:"master"`
}

var errStatus = errors.New("status request failed")

func (c *apiClient) status(ctx context.Context) (nodeStatus, error) {
	var st nodeStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return st, fmt.Errorf("%w: %w", errStatus, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return st, fmt.Errorf("%w: %w", errStatus, err)
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%w: %s: %s", errStatus, resp.Status, bytes.TrimSpace(b))
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%w: %w", errStatus, err)
	}
	return st, nil
}
