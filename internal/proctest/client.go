package proctest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/replicatorhq/replicator/internal/api"
)

// Client talks to one node's HTTP API.
type Client struct {
	Base string
	HC   *http.Client
}

// NewClient returns a client for the API at base with a per-request
// timeout.
func NewClient(base string, timeout time.Duration) *Client {
	return &Client{Base: base, HC: &http.Client{Timeout: timeout}}
}

// Close closes idle connections.
func (c *Client) Close() { c.HC.CloseIdleConnections() }

// StatusError is a non-200 answer.
type StatusError struct {
	Code int
	Body string
}

func (e *StatusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Code, e.Body) }

func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		return err
	}
	resp, err := c.HC.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return &StatusError{Code: resp.StatusCode, Body: string(bytes.TrimSpace(b))}
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: decoding %q: %w", method, path, b, err)
	}
	return nil
}

// Put stores body as a message of topic. A nil error means HTTP 200 and a
// decoded answer; its Status says whether it is PUT_OK.
func (c *Client) Put(ctx context.Context, topic string, body []byte) (api.PutAnswer, error) {
	var a api.PutAnswer
	err := c.do(ctx, http.MethodPost, "/v1/topics/"+url.PathEscape(topic)+"/messages", body, &a)
	return a, err
}

// Status returns GET /v1/status.
func (c *Client) Status(ctx context.Context) (api.Status, error) {
	var st api.Status
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, &st)
	return st, err
}

// Messages returns one page of GET /v1/messages from offset.
func (c *Client) Messages(ctx context.Context, offset int64, max int) (api.Messages, error) {
	var m api.Messages
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}, "max": {strconv.Itoa(max)}}
	err := c.do(ctx, http.MethodGet, "/v1/messages?"+q.Encode(), nil, &m)
	return m, err
}

// ReadFrom returns every message from offset (a record boundary) to the
// node's max offset.
func (c *Client) ReadFrom(ctx context.Context, offset int64) ([]api.Message, error) {
	var out []api.Message
	for {
		page, err := c.Messages(ctx, offset, api.MaxReadCount)
		if err != nil {
			return out, err
		}
		out = append(out, page.Messages...)
		if page.NextOffset <= offset || page.NextOffset >= page.MaxOffset {
			return out, nil
		}
		offset = page.NextOffset
	}
}

// Metric returns the value of the first sample of /metrics whose line
// starts with series (a metric name, with labels when given), or false.
func (c *Client) Metric(ctx context.Context, series string) (float64, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+"/metrics", nil)
	if err != nil {
		return 0, false, err
	}
	resp, err := c.HC.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false, err
	}
	return FindMetric(b, series)
}

// FindMetric finds series in a Prometheus text exposition.
func FindMetric(text []byte, series string) (float64, bool, error) {
	for _, line := range bytes.Split(text, []byte("\n")) {
		if !bytes.HasPrefix(line, []byte(series)) {
			continue
		}
		rest := line[len(series):]
		if len(rest) == 0 || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if rest[0] == '{' {
			i := bytes.IndexByte(rest, '}')
			if i < 0 {
				continue
			}
			rest = rest[i+1:]
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(string(f[0]), 64)
		if err != nil {
			return 0, false, fmt.Errorf("metric %s: %w", series, err)
		}
		return v, true, nil
	}
	return 0, false, nil
}
