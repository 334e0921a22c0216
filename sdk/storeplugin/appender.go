package storeplugin

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/replicatorhq/replicator/sdk/internal/shmring"
	"github.com/replicatorhq/replicator/sdk/proto/storev1"
	"github.com/replicatorhq/replicator/sdk/store"
)

// pendingOp is one Append or AppendAt waiting for its batch's ack.
type pendingOp struct {
	op     *storev1.AppendOp // its payload field (body, data) stays empty: see data
	data   []byte            // the payload: the message's body or AppendAt's bytes
	size   int
	done   chan opDone  // buffered: the receiver never blocks on a gone caller; nil for a queued AppendAt
	queued bool         // a queued AppendAt: its caller has returned, its bytes are in the tail already
	after  func(opDone) // called with the answer before done, if set
}

func (op *pendingOp) finish(d opDone) {
	if op.after != nil {
		op.after(d)
	}
	if op.done != nil {
		op.done <- d
	}
}

type opDone struct {
	res *storev1.OpResult
	err error // the batch failed as a whole (stream broken, plugin gone)
}

type batch struct {
	seq   uint64
	ops   []*pendingOp
	bytes int // the ops' sizes
}

// appender groups appends from any number of goroutines into batches on one
// bidi stream. One sender goroutine takes everything queued (up to
// BatchBytes) whenever fewer than MaxInFlight batches await their ack; one
// receiver goroutine per stream matches acks to batches in order. A broken
// stream fails its in-flight batches; the next append opens a new stream.
type appender struct {
	c     *Client
	mu    sync.Mutex
	cond  *sync.Cond // room in the queue, acks, the end of a send (wake)
	scond *sync.Cond // the sender goroutine: work to send (wake)

	queue   []*pendingOp
	queued  int           // bytes of the queue
	cur     *appendStream // nil: open one for the next batch
	nextSeq uint64
	closed  bool
	sending bool // a goroutine is in Send (the sender or an inline caller)
	// finishing counts acked batches whose ops' answers are being
	// delivered (outside mu): drain waits for them, so that what an
	// answer records (a refused queued AppendAt's error) is there when
	// drain returns.
	finishing int
	senderWG  sync.WaitGroup

	batches, ops uint64 // sent, for Stats

	// The append ring (ring.go): ringBusy while an entry is being filled
	// (mu released); rings to unmap at close; counters for Stats.
	ringBusy               bool
	bell                   *appendStream // the sender rings its ring (ringPut)
	rings                  []*shmring.Ring
	ringWaits, notifies    uint64
	ringEntries, ringBytes uint64
	doorbells              atomic.Uint64
}

// appendStream is one Append stream and the batches sent on it that await
// their ack (in order).
type appendStream struct {
	s        appendConn
	inflight []*batch
	unacked  int           // bytes of the batches in flight
	done     chan struct{} // closed when its receiver exits
	ring     *shmring.Ring // the side channel's append ring; nil: none
}

func newAppender(c *Client) *appender {
	a := &appender{c: c}
	a.cond = sync.NewCond(&a.mu)
	a.scond = sync.NewCond(&a.mu)
	a.senderWG.Add(1)
	go a.sendLoop()
	return a
}

func (a *appender) enqueue(op *pendingOp) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.waitRing() // the ring's entries go first
	if a.closed {
		return store.ErrClosed
	}
	a.queue = append(a.queue, op)
	a.queued += op.size
	if a.canSend() && a.cur != nil {
		// The stream has room and the caller waits anyway: send from this
		// goroutine (no hand-off to the sender, one wake-up less on the
		// latency path). Queued AppendAt (enqueueRaw) never send from
		// their caller: the slave's receive loop goes on to report.
		a.sendBatch()
		return nil
	}
	a.wake()
	return nil
}

// enqueueRaw queues a queued AppendAt of data at offset, in the segment at
// base. data is the host's copy in the tail (tail.copyIn), which the op
// sends without another copy: when the last queued op is a queued AppendAt
// ending at offset in the same segment, whose bytes end where data starts
// in the same tail block, and the two fit in BatchBytes, that op grows to
// cover data (the plugin then takes a run of slave frames with one
// AppendAt); else data is a new op. The sender goroutine sends it, never
// the caller: a write to the plugin's socket wakes the plugin, which on a
// busy machine can take the caller's core before the slave's receive loop
// has reported the frame to its master.
func (a *appender) enqueueRaw(offset int64, data []byte, base int64, after func(opDone)) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for !a.closed && a.queued >= maxQueuedBatches*a.c.cfg.BatchBytes {
		a.cond.Wait()
	}
	a.waitRing() // the ring's entries go first
	if a.closed {
		return store.ErrClosed
	}
	defer a.wake()
	if n := len(a.queue); n > 0 && a.queue[n-1].queued {
		last := a.queue[n-1]
		raw := last.op.GetRaw()
		l := len(last.data)
		if raw.Offset >= base && raw.Offset+int64(l) == offset && l+len(data) <= a.c.cfg.BatchBytes &&
			cap(last.data)-l >= len(data) && &last.data[:l+1][l] == &data[0] {
			last.data = last.data[:l+len(data)]
			last.size += len(data)
			a.queued += len(data)
			return nil
		}
	}
	op := &pendingOp{op: &storev1.AppendOp{Op: &storev1.AppendOp_Raw{Raw: &storev1.RawAppend{Offset: offset}}},
		data: data, size: len(data) + 16, queued: true, after: after}
	a.queue = append(a.queue, op)
	a.queued += op.size
	return nil
}

// wake wakes the goroutines waiting on the queue or the stream, and the
// sender goroutine when there is something for it to do (not on every ack
// or send: each of those wakes would cost a thread wake-up per batch).
// Called with mu held.
func (a *appender) wake() {
	a.cond.Broadcast()
	if a.closed || len(a.queue) > 0 {
		a.scond.Signal()
	}
}

// canSend reports whether a batch may go out now: fewer than MaxInFlight
// batches await their ack. Meanwhile appends accumulate in the queue and
// go as one batch, so a busy node wakes its plugin about once per round
// trip, not once per record. Called with mu held.
func (a *appender) canSend() bool {
	if a.sending || len(a.queue) == 0 {
		return false
	}
	return a.cur == nil || len(a.cur.inflight) < a.c.cfg.MaxInFlight
}

// maxQueuedBatches bounds the queue of unsent appends, in batches: a
// queued AppendAt waits while it is full (enqueueRaw), so a slave's
// receive loop slows to the plugin's pace instead of filling memory.
const maxQueuedBatches = 4

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
		for !a.closed && !a.canSend() && a.bell == nil {
			a.scond.Wait()
		}
		if st := a.bell; st != nil {
			a.bell = nil
			a.mu.Unlock()
			a.doorbell(st)
			a.mu.Lock()
			continue
		}
		if a.closed {
			failOps(a.queue, store.ErrClosed)
			a.queue, a.queued = nil, 0
			a.wake()
			return
		}
		if a.cur == nil {
			a.mu.Unlock()
			s, err := a.c.openAppend()
			a.mu.Lock()
			if err != nil {
				err = fmt.Errorf("storeplugin: append stream: %w", a.c.fail(err))
				failOps(a.queue, err)
				a.queue, a.queued = nil, 0
				a.wake()
				continue
			}
			a.cur = &appendStream{s: s, done: make(chan struct{})}
			if ss, ok := s.(*sideStream); ok && ss.ring != nil {
				a.cur.ring = ss.ring
				a.rings = append(a.rings, ss.ring)
			}
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
	b := &batch{seq: a.nextSeq, ops: a.queue[:n:n], bytes: bytes}
	a.queue = append([]*pendingOp(nil), a.queue[n:]...)
	a.queued -= bytes
	st := a.cur
	st.inflight = append(st.inflight, b)
	st.unacked += bytes
	msg := &storev1.AppendBatch{Seq: b.seq, Ops: make([]*storev1.AppendOp, n), WantRecords: a.c.tail != nil}
	parts := make([][]byte, n)
	for i, op := range b.ops {
		msg.Ops[i], parts[i] = op.op, op.data
	}
	a.sending = true
	a.mu.Unlock()
	err := st.s.Send(msg, parts)
	a.mu.Lock()
	a.sending = false
	if err != nil && a.cur == st {
		// The receiver sees the stream's real status and fails the
		// in-flight batches, this one included; stop sending on it.
		a.cur = nil
	}
	a.wake() // more may have queued meanwhile
}

func (a *appender) recvLoop(st *appendStream) {
	defer a.c.wg.Done()
	defer close(st.done)
	for {
		ack, records, err := st.s.Recv()
		if err == nil && st.ring != nil && ack.Seq == 0 && len(ack.Results) == 0 {
			a.ringNotified(st)
			continue
		}
		if err == nil {
			a.mu.Lock()
			if len(st.inflight) == 0 || st.inflight[0].seq != ack.Seq || len(ack.Results) != len(st.inflight[0].ops) || len(records) != len(ack.Results) {
				a.mu.Unlock()
				err = fmt.Errorf("storeplugin: append stream: ack %d does not match the batch in flight", ack.Seq)
			} else {
				b := st.inflight[0]
				st.inflight = st.inflight[1:]
				st.unacked -= b.bytes
				a.finishing++
				a.wake()
				a.mu.Unlock()
				// Bounds and the tail first: once an append returns,
				// Bounds().Max covers it and Read finds its bytes.
				a.c.observe(ack.Bounds)
				if a.c.tail != nil {
					a.c.tail.adopt(b.ops, ack.Results, records)
				}
				for i, op := range b.ops {
					op.finish(opDone{res: ack.Results[i]})
				}
				a.mu.Lock()
				a.finishing--
				a.cond.Broadcast()
				a.mu.Unlock()
				continue
			}
		}
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("storeplugin: append stream ended: %w", ErrPluginShutdown)
		} else {
			err = fmt.Errorf("storeplugin: append stream: %w", a.c.fail(err))
		}
		a.mu.Lock()
		a.ringLost(st, err)
		for _, b := range st.inflight {
			failOps(b.ops, err)
		}
		st.inflight = nil
		if a.cur == st {
			a.cur = nil
		}
		a.wake()
		a.mu.Unlock()
		return
	}
}

// drain waits until every queued append has been sent and acked (or failed)
// and the acked ones' answers are delivered.
func (a *appender) drain() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		a.waitRing()
		if len(a.queue) == 0 && (a.cur == nil || len(a.cur.inflight) == 0) && a.finishing == 0 {
			return
		}
		a.cond.Wait()
	}
}

// close sends what is queued, waits for the acks and ends the stream.
func (a *appender) close() {
	a.drain()
	a.mu.Lock()
	a.closed = true
	a.wake()
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

// unmapRings unmaps the streams' rings, once every receiver has exited
// (the client's wait group) and the appender is closed: no AppendAt fills
// a ring once wmu is ours (closed: none starts).
func (a *appender) unmapRings() {
	a.c.wmu.Lock()
	defer a.c.wmu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.rings {
		r.Close()
	}
	a.rings = nil
}

// AppendStats counts what went over the append stream.
type AppendStats struct {
	Batches uint64 // batches sent
	Ops     uint64 // appends sent in them
	// Framed counts the Appends the host framed itself and answered
	// without waiting for the plugin (ClientConfig.FrameAppends).
	Framed uint64
	Queued int // appends waiting for room on the stream
	// TailReads counts the Reads served from the bytes the appends brought
	// back (no round trip); StreamReads those that needed a ReadStream call.
	TailReads, StreamReads uint64
	// SideChannel: the current append stream is the unix-socket side
	// channel (false: the gRPC Append stream, or none open yet).
	SideChannel bool
	// Ring: the current side channel has a shared-memory append ring
	// (Linux); RingEntries and RingBytes count the queued AppendAt that
	// went through rings, Doorbells the plugin wake-ups for them,
	// RingNotifies the plugin's notifications, RingWaits the host's waits
	// on a ring (full, or emptying before a batch or a drain).
	Ring                               bool
	RingEntries, RingBytes             uint64
	Doorbells, RingNotifies, RingWaits uint64
}

// Stats reports the append stream's counters.
func (c *Client) Stats() AppendStats {
	a := c.app
	c.mu.Lock()
	framed := c.framed
	c.mu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	side := false
	st := AppendStats{Batches: a.batches, Ops: a.ops, Queued: len(a.queue), Framed: framed,
		TailReads: c.tailReads.Load(), StreamReads: c.streamReads.Load(),
		Doorbells: a.doorbells.Load(), RingNotifies: a.notifies, RingWaits: a.ringWaits,
		RingEntries: a.ringEntries, RingBytes: a.ringBytes}
	if a.cur != nil {
		_, side = a.cur.s.(*sideStream)
		st.Ring = a.cur.ring != nil
	}
	st.SideChannel = side
	return st
}
