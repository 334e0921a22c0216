package storeplugin

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/replicatorhq/replicator/sdk/proto/storev1"
	"github.com/replicatorhq/replicator/sdk/store"
)

// pendingOp is one Append or AppendAt waiting for its batch's ack.
type pendingOp struct {
	op    *storev1.AppendOp
	size  int
	done  chan opDone  // buffered: the receiver never blocks on a gone caller
	async func(opDone) // instead of done: called by the receiver (in-place appends)
}

func (op *pendingOp) finish(d opDone) {
	if op.async != nil {
		op.async(d)
		return
	}
	op.done <- d
}

type opDone struct {
	res *storev1.OpResult
	err error // the batch failed as a whole (stream broken, plugin gone)
}

type batch struct {
	seq uint64
	ops []*pendingOp
}

// appender groups appends from any number of goroutines into batches on one
// bidi stream. One sender goroutine takes everything queued (up to
// BatchBytes) whenever fewer than MaxInFlight batches await their ack; one
// receiver goroutine per stream matches acks to batches in order. A broken
// stream fails its in-flight batches; the next append opens a new stream.
type appender struct {
	c    *Client
	mu   sync.Mutex
	cond *sync.Cond

	queue    []*pendingOp
	cur      *appendStream // nil: open one for the next batch
	nextSeq  uint64
	closed   bool
	sending  bool // a goroutine is in Send (the sender or an inline caller)
	senderWG sync.WaitGroup

	batches, ops uint64 // sent, for Stats
}

// appendStream is one Append stream and the batches sent on it that await
// their ack (in order).
type appendStream struct {
	s        storev1.Store_AppendClient
	inflight []*batch
	done     chan struct{} // closed when its receiver exits
}

func newAppender(c *Client) *appender {
	a := &appender{c: c}
	a.cond = sync.NewCond(&a.mu)
	a.senderWG.Add(1)
	go a.sendLoop()
	return a
}

func (a *appender) enqueue(op *pendingOp) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return store.ErrClosed
	}
	a.queue = append(a.queue, op)
	if op.async == nil && a.canSend() && a.cur != nil {
		// The stream is idle and the caller waits anyway: send from this
		// goroutine (no hand-off to the sender, one wake-up less on the
		// latency path). In-place appends do not wait: the sender sends
		// them while the caller goes on.
		a.sendBatch()
		return nil
	}
	a.cond.Broadcast()
	return nil
}

// canSend reports whether a batch may go out now. Called with mu held.
func (a *appender) canSend() bool {
	return !a.sending && len(a.queue) > 0 && (a.cur == nil || len(a.cur.inflight) < a.c.cfg.MaxInFlight)
}

func failOps(ops []*pendingOp, err error) {
	for _, op := range ops {
		op.finish(opDone{err: err})
	}
}

func (a *appender) sendLoop() {
	defer a.senderWG.Done()
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		for !a.closed && !a.canSend() {
			a.cond.Wait()
		}
		if a.closed {
			failOps(a.queue, store.ErrClosed)
			a.queue = nil
			return
		}
		if a.cur == nil {
			a.mu.Unlock()
			s, err := a.c.rpc.Append(a.c.ctx)
			a.mu.Lock()
			if err != nil {
				err = fmt.Errorf("storeplugin: append stream: %w", a.c.fail(err))
				failOps(a.queue, err)
				a.queue = nil
				continue
			}
			a.cur = &appendStream{s: s, done: make(chan struct{})}
			a.c.wg.Add(1)
			go a.recvLoop(a.cur)
		}
		a.sendBatch()
	}
}

// sendBatch sends everything queued, up to BatchBytes (at least one op), on
// the current stream. Called with mu held, a.cur set and canSend true; it
// releases mu during the Send (one sender at a time: sending).
func (a *appender) sendBatch() {
	n, bytes := 0, 0
	for n < len(a.queue) && (n == 0 || bytes+a.queue[n].size <= a.c.cfg.BatchBytes) {
		bytes += a.queue[n].size
		n++
	}
	a.nextSeq++
	a.batches++
	a.ops += uint64(n)
	b := &batch{seq: a.nextSeq, ops: a.queue[:n:n]}
	a.queue = append([]*pendingOp(nil), a.queue[n:]...)
	st := a.cur
	st.inflight = append(st.inflight, b)
	msg := &storev1.AppendBatch{Seq: b.seq, Ops: make([]*storev1.AppendOp, n)}
	for i, op := range b.ops {
		msg.Ops[i] = op.op
	}
	a.sending = true
	a.mu.Unlock()
	err := st.s.Send(msg)
	a.mu.Lock()
	a.sending = false
	if err != nil && a.cur == st {
		// The receiver sees the stream's real status and fails the
		// in-flight batches, this one included; stop sending on it.
		a.cur = nil
	}
	a.cond.Broadcast() // more may have queued meanwhile
}

func (a *appender) recvLoop(st *appendStream) {
	defer a.c.wg.Done()
	defer close(st.done)
	for {
		ack, err := st.s.Recv()
		if err == nil {
			a.mu.Lock()
			if len(st.inflight) == 0 || st.inflight[0].seq != ack.Seq || len(ack.Results) != len(st.inflight[0].ops) {
				a.mu.Unlock()
				err = fmt.Errorf("storeplugin: append stream: ack %d does not match the batch in flight", ack.Seq)
			} else {
				b := st.inflight[0]
				st.inflight = st.inflight[1:]
				a.cond.Broadcast()
				a.mu.Unlock()
				// Bounds first: once Append returns, Bounds().Max covers it.
				a.c.observe(ack.Bounds)
				for i, op := range b.ops {
					op.finish(opDone{res: ack.Results[i]})
				}
				continue
			}
		}
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("storeplugin: append stream ended: %w", ErrPluginShutdown)
		} else {
			err = fmt.Errorf("storeplugin: append stream: %w", a.c.fail(err))
		}
		a.mu.Lock()
		for _, b := range st.inflight {
			failOps(b.ops, err)
		}
		st.inflight = nil
		if a.cur == st {
			a.cur = nil
		}
		a.cond.Broadcast()
		a.mu.Unlock()
		return
	}
}

// drain waits until every queued append has been sent and acked (or failed).
func (a *appender) drain() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for len(a.queue) > 0 || (a.cur != nil && len(a.cur.inflight) > 0) {
		a.cond.Wait()
	}
}

// close sends what is queued, waits for the acks and ends the stream.
func (a *appender) close() {
	a.drain()
	a.mu.Lock()
	a.closed = true
	a.cond.Broadcast()
	a.mu.Unlock()
	a.senderWG.Wait()

	a.mu.Lock()
	for a.sending || (a.cur != nil && len(a.cur.inflight) > 0) {
		a.cond.Wait()
	}
	st := a.cur
	a.cur = nil
	a.mu.Unlock()
	if st != nil {
		_ = st.s.CloseSend()
		<-st.done
	}
}

// AppendStats counts what went over the append stream.
type AppendStats struct {
	Batches uint64 // batches sent
	Ops     uint64 // appends sent in them
	Queued  int    // appends waiting for room on the stream
}

// Stats reports the append stream's counters.
func (c *Client) Stats() AppendStats {
	a := c.app
	a.mu.Lock()
	defer a.mu.Unlock()
	return AppendStats{Batches: a.batches, Ops: a.ops, Queued: len(a.queue)}
}
