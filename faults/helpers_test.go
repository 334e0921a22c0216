package faults

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/internal/proctest"
)

// Node settings shared by the scenarios: small segments so that every run
// rolls several of them.
const (
	segSize    = 256 << 10
	segSizeArg = "256KiB"
	maxMsgArg  = "32KiB"
	maxBody    = 8 << 10
)

// message i of worker w under seed: its topic and body are a pure function
// of (seed, w, i), so an acknowledgement needs no copy of the body.
func message(seed uint64, w, i int) (topic string, body []byte) {
	r := rand.New(rand.NewPCG(seed, uint64(w)<<32|uint64(i)))
	n := 16 + r.IntN(maxBody-16)
	body = make([]byte, n)
	head := fmt.Appendf(nil, "s%d-w%d-i%d|", seed, w, i)
	copy(body, head)
	for j := min(len(head), n); j < n; j += 8 {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], r.Uint64())
		copy(body[j:], b[:])
	}
	return fmt.Sprintf("Topic%d", (w+i)%3), body
}

// ack is a put answered 200.
type ack struct {
	W, I   int
	Status string
	Offset int64
	Next   int64
}

// gate holds producers back while the master is down.
type gate struct {
	mu sync.Mutex
	ch chan struct{} // closed while open
}

func newGate() *gate {
	ch := make(chan struct{})
	close(ch)
	return &gate{ch: ch}
}

func (g *gate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.ch:
		g.ch = make(chan struct{})
	default:
	}
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.ch:
	default:
		close(g.ch)
	}
}

func (g *gate) wait() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ch
}

// producer runs workers that put messages on a master until stopped and
// records every answer.
type producer struct {
	seed    uint64
	c       *proctest.Client
	gate    *gate
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	acks    []ack // every 200 answer, in arrival order
	okCount int
	byState map[string]int
	errs    int
	lastErr error
}

func startProducer(t *testing.T, seed uint64, apiURL string, workers int) *producer {
	t.Helper()
	p := &producer{seed: seed, c: proctest.NewClient(apiURL, 30*time.Second), gate: newGate(), stop: make(chan struct{}), byState: map[string]int{}}
	for w := range workers {
		p.wg.Add(1)
		go p.worker(w)
	}
	t.Cleanup(p.halt)
	return p
}

func (p *producer) worker(w int) {
	defer p.wg.Done()
	for i := 0; ; i++ {
		select {
		case <-p.stop:
			return
		case <-p.gate.wait():
		}
		topic, body := message(p.seed, w, i)
		a, err := p.c.Put(context.Background(), topic, body)
		p.mu.Lock()
		if err != nil {
			p.errs++
			p.lastErr = err
		} else {
			p.acks = append(p.acks, ack{W: w, I: i, Status: a.Status, Offset: a.Offset, Next: a.NextOffset})
			p.byState[a.Status]++
			if a.Status == "PUT_OK" {
				p.okCount++
			}
		}
		p.mu.Unlock()
		if err != nil {
			// A refused connection (the master is down) returns at once:
			// wait for the gate, which the test shuts before a kill.
			select {
			case <-p.stop:
				return
			case <-p.gate.wait():
			}
		}
	}
}

// halt stops the workers and waits for them (idempotent).
func (p *producer) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.wg.Wait()
	p.c.Close()
}

// snapshot returns the answers so far.
func (p *producer) snapshot() ([]ack, map[string]int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := make(map[string]int, len(p.byState))
	for k, v := range p.byState {
		st[k] = v
	}
	return append([]ack(nil), p.acks...), st, p.errs
}

// oks counts PUT_OK answers so far.
func (p *producer) oks() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.okCount
}

// waitOKs waits until at least n PUT_OK answers arrived.
func (p *producer) waitOKs(t *testing.T, n int) {
	t.Helper()
	proctest.Eventually(t, fmt.Sprintf("%d PUT_OK answers", n), proctest.WaitTimeout, func() error {
		if got := p.oks(); got < n {
			p.mu.Lock()
			defer p.mu.Unlock()
			return fmt.Errorf("%d PUT_OK, %v, %d errors (last %v)", got, p.byState, p.errs, p.lastErr)
		}
		return nil
	})
}

// verifyOnNode checks every PUT_OK answer in acks against the node at
// apiURL: the record at the answered offset holds the message put, and
// ends at the answered next offset. It returns how many it checked.
func verifyOnNode(ctx context.Context, seed uint64, apiURL string, acks []ack, onlyOK bool) (int, error) {
	lo := int64(-1)
	for _, a := range acks {
		if (!onlyOK || a.Status == "PUT_OK") && (lo < 0 || a.Offset < lo) {
			lo = a.Offset
		}
	}
	if lo < 0 {
		return 0, nil
	}
	c := proctest.NewClient(apiURL, 30*time.Second)
	defer c.Close()
	msgs, err := c.ReadFrom(ctx, lo)
	if err != nil {
		return 0, fmt.Errorf("reading %s from %d: %w", apiURL, lo, err)
	}
	at := make(map[int64]*api.Message, len(msgs))
	for i := range msgs {
		at[msgs[i].Offset] = &msgs[i]
	}
	n := 0
	for _, a := range acks {
		if onlyOK && a.Status != "PUT_OK" {
			continue
		}
		topic, body := message(seed, a.W, a.I)
		m := at[a.Offset]
		switch {
		case m == nil:
			return n, fmt.Errorf("LOSS: message w%d-i%d answered %s at offset %d (next %d) is not on %s (read %d messages from %d)",
				a.W, a.I, a.Status, a.Offset, a.Next, apiURL, len(msgs), lo)
		case m.Topic != topic || !bytes.Equal(m.Body, body):
			return n, fmt.Errorf("CORRUPTION: offset %d on %s holds topic %q body %d bytes, want w%d-i%d topic %q body %d bytes",
				a.Offset, apiURL, m.Topic, len(m.Body), a.W, a.I, topic, len(body))
		case m.Offset+int64(m.Size) != a.Next:
			return n, fmt.Errorf("record at %d on %s ends at %d, answered next offset %d", a.Offset, apiURL, m.Offset+int64(m.Size), a.Next)
		}
		n++
	}
	return n, nil
}

// status returns a node's status, failing the test on an error.
func status(t *testing.T, apiURL string) api.Status {
	t.Helper()
	c := proctest.NewClient(apiURL, 10*time.Second)
	defer c.Close()
	st, err := c.Status(context.Background())
	if err != nil {
		t.Fatalf("status of %s: %v", apiURL, err)
	}
	return st
}

// waitCaughtUp waits until the slave's max offset equals the master's.
func waitCaughtUp(t *testing.T, m, s *proctest.Proc) api.Status {
	t.Helper()
	var ms api.Status
	proctest.Eventually(t, "slave caught up", proctest.WaitTimeout, func() error {
		ms = status(t, m.API)
		ss := status(t, s.API)
		if ms.MaxOffset != ss.MaxOffset {
			return fmt.Errorf("master max %d, slave max %d (slave link %+v)", ms.MaxOffset, ss.MaxOffset, ss.Master)
		}
		return nil
	})
	return ms
}

// waitSlaves waits until the master lists n connected slaves.
func waitSlaves(t *testing.T, m *proctest.Proc, n int) {
	t.Helper()
	proctest.Eventually(t, fmt.Sprintf("%d slave(s) connected", n), proctest.WaitTimeout, func() error {
		if got := len(status(t, m.API).Slaves); got != n {
			return fmt.Errorf("%d slaves", got)
		}
		return nil
	})
}

// compareDirs compares the commit logs of two data directories over
// [lo, hi) byte for byte.
func compareDirs(t *testing.T, mdir, sdir string, lo, hi int64) int {
	t.Helper()
	files, err := proctest.CompareCommitLogs(filepath.Join(mdir, "commitlog"), filepath.Join(sdir, "commitlog"), segSize, lo, hi)
	if err != nil {
		t.Fatalf("commit logs differ: %v", err)
	}
	return files
}

// isStatus reports whether err is an HTTP answer with code.
func isStatus(err error, code int) bool {
	var se *proctest.StatusError
	return errors.As(err, &se) && se.Code == code
}

// putOne stores one message and returns the answer.
func putOne(t *testing.T, apiURL, topic string, body []byte) (api.PutAnswer, error) {
	t.Helper()
	c := proctest.NewClient(apiURL, 30*time.Second)
	defer c.Close()
	return c.Put(context.Background(), topic, body)
}

// result logs one scenario's counts in a fixed form (docs/reliability.md
// quotes them).
func result(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("RESULT %s: "+format, append([]any{t.Name()}, args...)...)
}

// waitAnswers waits until n more puts were answered (any status) or
// failed.
func (p *producer) waitAnswers(t *testing.T, n int) {
	t.Helper()
	p.mu.Lock()
	target := len(p.acks) + p.errs + n
	p.mu.Unlock()
	proctest.Eventually(t, fmt.Sprintf("%d more answers", n), proctest.WaitTimeout, func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if got := len(p.acks) + p.errs; got < target {
			return fmt.Errorf("%d answers", got)
		}
		return nil
	})
}

// quota is short in the short form and long in the long one.
func quota(short, long_ int) int {
	if long() {
		return long_
	}
	return short
}
