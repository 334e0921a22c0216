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
	hook  func(opDone) // called first, if set (bookkeeping of host-encoded appends)
}

func (op *pendingOp) finish(d opDone) {
	if op.hook != nil {
		op.hook(d)
	}
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
	seq    uint64
	ops    []*pendingOp
	groups []int // per op on the wire: how many of ops it carries (merged in-place ops)
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
	waiters  int           // ops in queue whose caller waits (not in-place)
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
	s        appendConn
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
	if op.async == nil {
		a.waiters++
	}
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

// canSend reports whether a batch may go out now: up to MaxInFlight
// batches await their ack while a caller waits in the queue, one while
// only in-place appends (nobody waits for them) are queued: those
// accumulate meanwhile and go as one merged op, so a busy slave or master
// wakes its plugin once per round trip, not once per record. Called with
// mu held.
func (a *appender) canSend() bool {
	if a.sending || len(a.queue) == 0 {
		return false
	}
	if a.cur == nil {
		return true
	}
	limit := 1
	if a.waiters > 0 {
		limit = a.c.cfg.MaxInFlight
	}
	return len(a.cur.inflight) < limit
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
			a.queue, a.waiters = nil, 0
			return
		}
		if a.cur == nil {
			a.mu.Unlock()
			s, err := a.c.openAppend()
			a.mu.Lock()
			if err != nil {
				err = fmt.Errorf("storeplugin: append stream: %w", a.c.fail(err))
				failOps(a.queue, err)
				a.queue, a.waiters = nil, 0
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
	for _, op := range a.queue[:n] {
		if op.async == nil {
			a.waiters--
		}
	}
	a.queue = append([]*pendingOp(nil), a.queue[n:]...)
	st := a.cur
	st.inflight = append(st.inflight, b)
	msg := &storev1.AppendBatch{Seq: b.seq}
	msg.Ops, b.groups = a.wireOps(b.ops)
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

// maxMergedInPlace bounds the bytes one merged in-place op covers.
const maxMergedInPlace = 4 << 20

// wireOps turns a batch's appends into the ops sent: consecutive in-place
// ops (slave frames, host-encoded records) that are contiguous and inside
// one segment become one op, so the plugin reads and adopts them with one
// AppendAt; groups says how many appends each op carries (they share its
// result).
func (a *appender) wireOps(ops []*pendingOp) ([]*storev1.AppendOp, []int) {
	wire := make([]*storev1.AppendOp, 0, len(ops))
	groups := make([]int, 0, len(ops))
	seg, anchor := a.c.segSize, a.c.segAnchor
	base := func(off int64) int64 {
		d := (off - anchor) % seg
		if d < 0 {
			d += seg
		}
		return off - d
	}
	var last *storev1.InPlace
	for _, op := range ops {
		ip, ok := op.op.Op.(*storev1.AppendOp_InPlace)
		if !ok {
			last = nil
			wire, groups = append(wire, op.op), append(groups, 1)
			continue
		}
		cur := ip.InPlace
		if last != nil && seg > 0 && last.Offset+last.Length == cur.Offset && cur.Length > 0 &&
			base(last.Offset) == base(cur.Offset+cur.Length-1) && last.Length+cur.Length <= maxMergedInPlace {
			last.Length += cur.Length
			groups[len(groups)-1]++
			continue
		}
		last = &storev1.InPlace{Offset: cur.Offset, Length: cur.Length}
		wire = append(wire, &storev1.AppendOp{Op: &storev1.AppendOp_InPlace{InPlace: last}})
		groups = append(groups, 1)
	}
	return wire, groups
}

func (a *appender) recvLoop(st *appendStream) {
	defer a.c.wg.Done()
	defer close(st.done)
	for {
		ack, err := st.s.Recv()
		if err == nil {
			a.mu.Lock()
			if len(st.inflight) == 0 || st.inflight[0].seq != ack.Seq || len(ack.Results) != len(st.inflight[0].groups) {
				a.mu.Unlock()
				err = fmt.Errorf("storeplugin: append stream: ack %d does not match the batch in flight", ack.Seq)
			} else {
				b := st.inflight[0]
				st.inflight = st.inflight[1:]
				a.cond.Broadcast()
				a.mu.Unlock()
				// Bounds first: once Append returns, Bounds().Max covers it.
				a.c.observe(ack.Bounds)
				i := 0
				for g, n := range b.groups {
					for _, op := range b.ops[i : i+n] {
						op.finish(opDone{res: ack.Results[g]})
					}
					i += n
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
	// HostEncoded counts the Appends the host encoded and wrote into the
	// plugin's segment files itself (no round trip; see hostappend.go).
	HostEncoded uint64
	// SideChannel: the current append stream is the unix-socket side
	// channel (false: the gRPC Append stream, or none open yet).
	SideChannel bool
}

// Stats reports the append stream's counters.
func (c *Client) Stats() AppendStats {
	a := c.app
	a.mu.Lock()
	defer a.mu.Unlock()
	side := false
	if a.cur != nil {
		_, side = a.cur.s.(*sideStream)
	}
	return AppendStats{Batches: a.batches, Ops: a.ops, Queued: len(a.queue), SideChannel: side, HostEncoded: c.hostAppended.Load()}
}
