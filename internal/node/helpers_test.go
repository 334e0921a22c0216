package node

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/replicatorhq/replicator/internal/api"
)

// logBuf collects a node's log lines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lines returns the lines containing every one of subs.
func (l *logBuf) lines(subs ...string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

func (l *logBuf) logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "replicator", Level: hclog.Info, Output: l, DisableTime: true})
}

// started is a node running in this process.
type started struct {
	n    *Node
	stop func() error
}

// startNode runs cfg and waits until it serves.
func startNode(t *testing.T, cfg Config) *started {
	t.Helper()
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	select {
	case <-n.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("node did not start: %v", err)
	}
	s := &started{n: n}
	var once sync.Once
	var serr error
	s.stop = func() error {
		once.Do(func() {
			cancel()
			serr = <-done
		})
		return serr
	}
	t.Cleanup(func() { s.stop() })
	return s
}

// putMessages stores "m0" to "m<n-1>" on topic T through the API at url
// and returns the last answer.
func putMessages(t *testing.T, hc *http.Client, url string, n int) api.PutAnswer {
	t.Helper()
	var last api.PutAnswer
	for i := range n {
		resp, err := hc.Post(url+"/v1/topics/T/messages", "", strings.NewReader(fmt.Sprint("m", i)))
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&last)
		resp.Body.Close()
		if resp.StatusCode != 200 || err != nil {
			t.Fatalf("put %d: %d %v", i, resp.StatusCode, err)
		}
	}
	return last
}

// replicated waits until the node at url holds the record put answered
// (an async master answers before its slave has it; a read past the
// slave's log is a 416, not a long poll) and returns that record.
func replicated(t *testing.T, hc *http.Client, url string, put api.PutAnswer) api.Message {
	t.Helper()
	eventually(t, "replica reaches the put's end", 20*time.Second, func() error {
		if st := nodeStatus(t, hc, url); st.MaxOffset < put.NextOffset {
			return fmt.Errorf("max offset %d, want %d", st.MaxOffset, put.NextOffset)
		}
		return nil
	})
	var page api.Messages
	getJSON(t, hc, fmt.Sprintf("%s/v1/messages?offset=%d&max=1", url, put.Offset), &page)
	if len(page.Messages) != 1 {
		t.Fatalf("read at %d: %d messages, want 1", put.Offset, len(page.Messages))
	}
	return page.Messages[0]
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, d time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, d, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dialFrom connects to addr from the loopback address ip.
func dialFrom(t testing.TB, ip, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	return d.Dial("tcp", addr)
}

// waitClosed reads (and discards) until the peer closes c; it fails if
// that takes longer than d.
func waitClosed(c net.Conn, d time.Duration) error {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%s: still open after %s", c.LocalAddr(), d)
	}
	return nil
}

func report(v int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(v))
	return b
}

// compareSegments checks that the slave's commit-log files hold the
// master's bytes below max.
func compareSegments(t *testing.T, masterDir, slaveDir string, max int64) {
	t.Helper()
	md, sd := filepath.Join(masterDir, CommitLogDir), filepath.Join(slaveDir, CommitLogDir)
	ents, err := os.ReadDir(md)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, e := range ents {
		var base int64
		if _, err := fmt.Sscanf(e.Name(), "%d", &base); err != nil || base >= max {
			continue
		}
		mb, err := os.ReadFile(filepath.Join(md, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sb, err := os.ReadFile(filepath.Join(sd, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		n := min(int64(len(mb)), max-base)
		if int64(len(sb)) < n || !bytes.Equal(mb[:n], sb[:n]) {
			t.Fatalf("segment %s differs below offset %d", e.Name(), max)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no segment compared")
	}
}

func nodeStatus(t *testing.T, hc *http.Client, url string) api.Status {
	t.Helper()
	var st api.Status
	getJSON(t, hc, url+"/v1/status", &st)
	return st
}
