package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/node"
)

// maxAnswer bounds an API answer the CLI reads (a messages page holds at
// most api.DefaultMaxReadBytes of bodies, base64-encoded).
const maxAnswer = 64 << 20

// client talks to a node's HTTP API.
type client struct {
	base string
	hc   *http.Client
}

func newClient(base string, timeout time.Duration) *client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64 // the demo's producers share a host
	return &client{base: base, hc: &http.Client{Timeout: timeout, Transport: tr}}
}

// newSecureClient is newClient with the --ca, --cert/--cert-key and
// --token-file (or $REPLICATOR_API_TOKEN) options of a client command.
func (e *env) newSecureClient(sec clientSecurity, base string, timeout time.Duration) (*client, error) {
	var tlsCfg *tls.Config
	if sec.CA != "" || sec.Cert != "" || sec.Key != "" {
		var err error
		if tlsCfg, err = node.ClientTLS(sec.CA, sec.Cert, sec.Key, ""); err != nil {
			return nil, fmt.Errorf("--ca/--cert/--cert-key: %w", err)
		}
		if strings.HasPrefix(base, "http://") {
			return nil, fmt.Errorf("--ca, --cert and --cert-key need an https:// URL (not %s)", base)
		}
	}
	tok, err := e.apiToken(sec.TokenFile, "--token-file")
	if err != nil {
		return nil, err
	}
	hc := node.APIClient(tlsCfg, tok, timeout)
	return &client{base: base, hc: hc}, nil
}

// statusError is an API answer other than 2xx.
type statusError struct {
	Code int
	Msg  string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Code, http.StatusText(e.Code), e.Msg)
}

// do sends a request and decodes a JSON answer into out.
func (c *client) do(ctx context.Context, method, path string, q url.Values, h http.Header, body []byte, out any) error {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, u, err)
	}
	if len(data) > maxAnswer {
		return fmt.Errorf("%s %s: answer larger than %d bytes", method, u, maxAnswer)
	}
	if resp.StatusCode/100 != 2 {
		var ea api.ErrorAnswer
		if json.Unmarshal(data, &ea) != nil || ea.Error == "" {
			ea.Error = strings.TrimSpace(string(data))
		}
		return &statusError{Code: resp.StatusCode, Msg: ea.Error}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: bad answer: %w", method, u, err)
	}
	return nil
}

// put sends one message.
func (c *client) put(ctx context.Context, topic string, q url.Values, h http.Header, body []byte) (api.PutAnswer, error) {
	var ans api.PutAnswer
	err := c.do(ctx, http.MethodPost, "/v1/topics/"+url.PathEscape(topic)+"/messages", q, h, body, &ans)
	return ans, err
}

func (c *client) status(ctx context.Context) (api.Status, error) {
	var st api.Status
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, nil, nil, &st)
	return st, err
}

func (c *client) messages(ctx context.Context, offset int64, max int, wait time.Duration) (api.Messages, error) {
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}, "max": {strconv.Itoa(max)}}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	var m api.Messages
	err := c.do(ctx, http.MethodGet, "/v1/messages", q, nil, nil, &m)
	return m, err
}

func runStatus(ctx context.Context, e *env) int {
	o := &e.opts.status
	c, err := e.newSecureClient(o.sec, o.API, o.Timeout)
	if err != nil {
		return e.failErr("status", usage(err))
	}
	if o.wait.any() {
		if err := e.waitStatus(ctx, c, o.wait, o.sec, o.Timeout); err != nil {
			return e.failErr("status", err)
		}
	}
	if o.JSON {
		var raw json.RawMessage
		if err := c.do(ctx, http.MethodGet, "/v1/status", nil, nil, nil, &raw); err != nil {
			return e.fail("status: %v", err)
		}
		var buf bytes.Buffer
		json.Indent(&buf, raw, "", "  ")
		buf.WriteByte('\n')
		e.stdout.Write(buf.Bytes())
		return exitOK
	}
	st, err := c.status(ctx)
	if err != nil {
		return e.fail("status: %v", err)
	}
	printStatus(e.stdout, o.API, st)
	return exitOK
}

func printStatus(w io.Writer, apiURL string, st api.Status) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "node\t%s\n", apiURL)
	fmt.Fprintf(tw, "role\t%s\n", st.Role)
	if st.Version != "" {
		fmt.Fprintf(tw, "version\t%s\n", st.Version)
	}
	fmt.Fprintf(tw, "offsets\tmin %d  max %d  flushed %d\n", st.MinOffset, st.MaxOffset, st.FlushedOffset)
	fmt.Fprintf(tw, "segment size\t%s\n", humanBytes(st.SegmentSize))
	if st.HAAddr != "" {
		fmt.Fprintf(tw, "ha listen\t%s\n", st.HAAddr)
	}
	if st.Master != nil {
		m := st.Master
		state := "disconnected"
		if m.Connected {
			state = "connected"
		}
		fmt.Fprintf(tw, "master\t%s (%s, %d reconnects)\n", m.Addr, state, m.Reconnects)
		fmt.Fprintf(tw, "ack sent\t%d\n", m.AckSent)
		if m.LastFrameMsAgo >= 0 {
			fmt.Fprintf(tw, "last frame\t%s ago\n", time.Duration(m.LastFrameMsAgo)*time.Millisecond)
		}
		if m.LastError != "" {
			fmt.Fprintf(tw, "last error\t%s\n", m.LastError)
		}
		if m.Diverged != "" {
			fmt.Fprintf(tw, "DIVERGED\t%s\n", m.Diverged)
		}
		if m.SegmentError != "" {
			fmt.Fprintf(tw, "SEGMENT ERROR\t%s\n", m.SegmentError)
		}
	}
	tw.Flush()
	printAutoSwitchStatus(w, st) // role.go
	printControllerStatus(w, st) // nodecmd.go
	if st.Master == nil {
		if len(st.Slaves) == 0 {
			fmt.Fprintf(w, "slaves: none connected\n")
			return
		}
		fmt.Fprintf(w, "slaves:\n")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  ADDR\tSTATE\tACK OFFSET\tLAG\tLAST ACK\n")
		for _, s := range st.Slaves {
			last := "never"
			if s.LastAckMsAgo >= 0 {
				last = (time.Duration(s.LastAckMsAgo) * time.Millisecond).String() + " ago"
			}
			state, lag := slaveState(s)
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\n", s.Addr, state, s.AckOffset, lag, last)
		}
		tw.Flush()
	}
}

// slaveState is the STATE and LAG columns of a slave: an out-of-range
// slave (its request offset is outside the master's log: the master only
// sends heartbeats) has no meaningful lag, and says so instead of a
// negative number.
func slaveState(s api.SlaveStatus) (state, lag string) {
	switch {
	case s.OutOfRange:
		return fmt.Sprintf("out of range (asked for %d)", s.RequestOffset), "-"
	case s.LagBytes < 0:
		return "ahead of the master", "-"
	case s.LastAckMsAgo < 0:
		return "connecting", humanBytes(s.LagBytes)
	}
	return "replicating", humanBytes(s.LagBytes)
}

func runTail(ctx context.Context, e *env) int {
	o := &e.opts.tail
	c, err := e.newSecureClient(o.sec, o.API, o.Timeout+10*time.Second)
	if err != nil {
		return e.failErr("tail", usage(err))
	}
	offset := o.From
	if offset < 0 {
		st, err := c.status(ctx)
		if err != nil {
			return e.fail("tail: %v", err)
		}
		offset = st.MinOffset
	}
	out := bufio.NewWriter(e.stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for {
		var wait time.Duration
		if o.Follow {
			wait = 10 * time.Second
		}
		page, err := c.messages(ctx, offset, o.Max, wait)
		if err != nil {
			if ctx.Err() != nil {
				return exitOK // interrupted while following
			}
			out.Flush()
			return e.fail("tail: %v", err)
		}
		for i := range page.Messages {
			m := &page.Messages[i]
			if o.JSON {
				enc.Encode(m)
			} else {
				printMessage(out, m)
			}
		}
		out.Flush()
		progressed := page.NextOffset > offset
		offset = page.NextOffset
		if !o.Follow && (!progressed || offset >= page.MaxOffset) {
			return exitOK
		}
		if ctx.Err() != nil {
			return exitOK
		}
	}
}

func printMessage(w io.Writer, m *api.Message) {
	fmt.Fprintf(w, "offset=%d topic=%s queue=%d queue_offset=%d", m.Offset, m.Topic, m.QueueID, m.QueueOffset)
	if m.Tags != "" {
		fmt.Fprintf(w, " tags=%s", quoteIfNeeded(m.Tags))
	}
	if m.Keys != "" {
		fmt.Fprintf(w, " keys=%s", quoteIfNeeded(m.Keys))
	}
	var extra []string
	for k := range m.Properties {
		if k != api.PropertyTags && k != api.PropertyKeys {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		fmt.Fprintf(w, " %s=%s", quoteIfNeeded(k), quoteIfNeeded(m.Properties[k]))
	}
	fmt.Fprintf(w, " body=%s\n", quoteIfNeeded(string(m.Body)))
}

// quoteIfNeeded returns s as is when it is printable text without spaces,
// quotes, '=' or newlines, else Go-quoted.
func quoteIfNeeded(s string) string {
	if s == "" || !utf8.ValidString(s) || strings.ContainsAny(s, " \t\r\n\"'=\\") {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// humanBytes renders n bytes with a binary unit.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= unit
		if f < unit && f > -unit {
			return fmt.Sprintf("%.1f %s", f, u)
		}
	}
	return fmt.Sprintf("%.1f PiB", f/unit)
}
