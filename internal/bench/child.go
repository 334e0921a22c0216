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
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Child process timings.
const (
	childStartTimeout = 60 * time.Second // /readyz, and the slave connecting
	childStopTimeout  = 30 * time.Second // exit after SIGTERM
	childPoll         = 10 * time.Millisecond
)

// child is a replicator node started by the bench.
type child struct {
	name string
	cmd  *exec.Cmd
	log  string
	api  string // http://host:port
	done chan struct{}
	err  error
}

// startChild runs exe with args, its output in logPath. The child gets no
// REPLICATOR_* variables: its settings are the bench's flags only.
func startChild(exe, name, logPath, api string, args ...string) (*child, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, fmt.Errorf("starting the %s: %w", name, err)
	}
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("starting the %s: %w", name, err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = f, f
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REPLICATOR_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.SysProcAttr = childSysProcAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting the %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, log: logPath, api: api, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		f.Close()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// stop sends SIGTERM and waits for the exit (SIGKILL after
// childStopTimeout). It returns an error unless the child exited 0.
func (c *child) stop() error {
	select {
	case <-c.done:
		return c.exitErr()
	default:
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return c.exitErr()
	case <-time.After(childStopTimeout):
		c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("the %s did not stop within %s; killed (log %s)", c.name, childStopTimeout, c.log)
	}
}

func (c *child) exitErr() error {
	if c.err != nil {
		return fmt.Errorf("the %s exited: %w (log %s)", c.name, c.err, c.log)
	}
	return nil
}

// exited describes an early exit with the log's last lines.
func (c *child) exited() error {
	tail := ""
	if b, err := os.ReadFile(c.log); err == nil {
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 10 {
			lines = lines[len(lines)-10:]
		}
		tail = "\n  " + strings.Join(lines, "\n  ")
	}
	return fmt.Errorf("the %s exited early (%v); its log %s ends with:%s", c.name, c.err, c.log, tail)
}

// waitReady polls /readyz until 200.
func (c *child) waitReady(ctx context.Context, hc *http.Client) error {
	deadline := time.Now().Add(childStartTimeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.api+"/readyz", nil)
		if resp, err := hc.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-c.done:
			return c.exited()
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(childPoll):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the %s did not become ready within %s (log %s)", c.name, childStartTimeout, c.log)
		}
	}
}

// freeAddrs returns n distinct free loopback addresses.
func freeAddrs(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		lns = append(lns, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
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
