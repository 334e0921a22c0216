package storeplugin

import (
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/replicatorhq/replicator/sdk/internal/shmring"
	"github.com/replicatorhq/replicator/sdk/proto/storev1"
	"github.com/replicatorhq/replicator/sdk/store"
)

// The append ring (Linux): a queued AppendAt's bytes go into a shared
// memory ring (sdk/internal/shmring) that the host creates for each append
// side channel and passes to the plugin over it, instead of through the
// socket. The host reads a slave's frame body from its socket straight
// into the ring (AppendAtFrom) and the plugin applies each entry with
// Store.AppendAt from there: the two socket copies and the round trip per
// batch go, and the plugin is woken only when it sleeps.
//
// On the channel, a frame_version with ringVersionBit set asks for it; the
// host then writes a 4-byte setup message (flags; bit 0: a ring's memfd
// is attached with SCM_RIGHTS) before the first frame. Then:
//
//	host -> plugin  AppendBatch with seq 0 and no ops: a doorbell (the
//	                ring has entries and the plugin said it sleeps); no ack
//	plugin -> host  AppendAck with seq 0 and no results: a notification
//	                (the room or the emptiness the host waits for, or
//	                the plugin's failure, in the ring's header)
//
// The plugin applies ring entries only between batches: the host puts
// nothing in the ring while batches are queued or unacked, and queues
// nothing while the ring holds entries, so the log gets every append in
// the host's order.

// ringVersionBit in a side channel's frame_version asks for the append
// ring; the low 16 bits stay the frame layout (side.FrameVersion).
const ringVersionBit = 1 << 16

// defaultRingBytes is the ring's data area (ClientConfig.RingBytes).
const defaultRingBytes = 8 << 20

// doorbell and notification frames.
var (
	doorbellBatch = &storev1.AppendBatch{}
	ringNotify    = &storev1.AppendAck{}
)

// errRingGone: the append stream whose ring held an AppendAt ended.
var errRingGone = fmt.Errorf("storeplugin: append ring: stream ended: %w", ErrPluginShutdown)

// ringPut appends n bytes at offset through the current stream's ring:
// fill writes them into the room (reads a frame body from the socket, or
// copies AppendAt's data). used=false: there is no ring (or the entry is
// larger than it takes) and nothing happened; use the socket. If fill
// fails nothing is published and its error comes back.
func (a *appender) ringPut(offset int64, n int, fill func([]byte) error) (used bool, err error) {
	a.mu.Lock()
	st := a.cur
	if a.closed || st == nil || st.ring == nil || n > st.ring.MaxEntry() {
		a.mu.Unlock()
		return false, nil
	}
	// Batches first: the plugin applies the ring between batches only.
	for !a.closed && a.cur == st && (len(a.queue) > 0 || len(st.inflight) > 0 || a.sending || a.finishing > 0) {
		a.cond.Wait()
	}
	room, err := a.ringReserve(st, n)
	if err != nil {
		a.mu.Unlock()
		return true, err
	}
	a.ringBusy = true
	a.mu.Unlock()
	ferr := fill(room)
	a.mu.Lock()
	a.ringBusy = false
	if ferr == nil && a.cur != st {
		ferr = errRingGone
	}
	if ferr == nil {
		st.ring.Publish(offset)
		a.ringEntries++
		a.ringBytes += uint64(n)
		if st.ring.TakeSleeping() {
			// The sender goroutine rings, not the caller (a slave's
			// receive loop): a write that wakes the plugin can cost the
			// loop its core before it reports the frame.
			a.bell = st
			a.scond.Signal()
		}
	}
	a.cond.Broadcast()
	a.mu.Unlock()
	return true, ferr
}

// ringReserve waits for room for n bytes in st's ring. Called with mu
// held; it may release it while it rings a sleeping plugin.
func (a *appender) ringReserve(st *appendStream, n int) ([]byte, error) {
	for {
		if a.closed {
			return nil, store.ErrClosed
		}
		if a.cur != st {
			return nil, errRingGone
		}
		if err := a.c.ringFailed(st); err != nil {
			return nil, err
		}
		room, ok, err := st.ring.Reserve(n)
		if err != nil {
			return nil, a.ringBroken(st, err)
		}
		if ok {
			st.ring.ClearWaiting()
			return room, nil
		}
		// Full: be told once half of it is free.
		if a.waitPlugin(st, uint64(st.ring.DataSize()/2), func() bool {
			room, ok, _ = st.ring.Reserve(n)
			return ok
		}) {
			return room, nil
		}
	}
}

// waitRing waits until the current stream's ring holds nothing unconsumed
// (or the stream or the plugin failed: the client's error says so).
// Called with mu held; it may release it while it rings a sleeping plugin.
func (a *appender) waitRing() {
	for {
		st := a.cur
		if st == nil || st.ring == nil {
			return
		}
		if a.ringBusy { // an entry is being filled: wait for its publish
			a.ringWaits++
			a.cond.Wait()
			continue
		}
		if a.c.ringFailed(st) != nil {
			return
		}
		u, err := st.ring.Unconsumed()
		if err != nil {
			a.ringBroken(st, err)
			return
		}
		if u == 0 || a.waitPlugin(st, 0, func() bool {
			u, err := st.ring.Unconsumed()
			return err == nil && u == 0
		}) {
			return
		}
	}
}

// waitPlugin is one wait on st's ring for the plugin's progress: it asks
// for a notification once at most max bytes are unconsumed; if ready then
// holds, it withdraws the request and returns true. Otherwise it rings a
// plugin that sleeps, or waits for the notification (or any other change),
// and returns false: the caller looks again. Called with mu held; it may
// release it.
func (a *appender) waitPlugin(st *appendStream, max uint64, ready func() bool) bool {
	st.ring.SetWaiting(max)
	if ready() {
		st.ring.ClearWaiting()
		return true
	}
	if st.ring.TakeSleeping() {
		a.mu.Unlock()
		a.doorbell(st)
		a.mu.Lock()
		return false
	}
	a.ringWaits++
	a.cond.Wait()
	return false
}

// drainRing waits until the ring is applied (a read of bytes it may hold).
func (a *appender) drainRing() {
	a.mu.Lock()
	a.waitRing()
	a.mu.Unlock()
}

// doorbell wakes the plugin to apply the ring. A failed write breaks the
// stream, which the receiver sees.
func (a *appender) doorbell(st *appendStream) {
	a.doorbells.Add(1)
	if err := st.s.(*sideStream).write(doorbellBatch, nil); err != nil {
		a.c.log.Debug("append ring doorbell failed", "error", err)
	}
}

// ringBroken records a ring the plugin corrupted (a value out of bounds in
// its half of the header): the store is unusable, as after a refused
// queued AppendAt. Called with mu held.
func (a *appender) ringBroken(st *appendStream, err error) error {
	err = fmt.Errorf("storeplugin: append ring: %w", err)
	a.c.queuedDone(opDone{err: err})
	return err
}

// ringNotified handles the plugin's notification: a failure it recorded,
// then whoever waits on the ring looks again.
func (a *appender) ringNotified(st *appendStream) {
	a.c.ringFailed(st)
	a.mu.Lock()
	a.notifies++
	a.cond.Broadcast()
	a.mu.Unlock()
}

// ringLost records, when st's stream ended, the ring entries the plugin
// had not applied: they may be lost, as queued AppendAt in flight are.
// Called with mu held (the producer's state is mu's).
func (a *appender) ringLost(st *appendStream, err error) {
	if st.ring == nil {
		return
	}
	if u, uerr := st.ring.Unconsumed(); uerr != nil || u > 0 {
		a.c.queuedDone(opDone{err: fmt.Errorf("%d bytes in the append ring: %w", u, err)})
	}
}

// ringFailed returns (and records, once) the error the plugin wrote in
// st's ring when an entry failed.
func (c *Client) ringFailed(st *appendStream) error {
	detail, failed := st.ring.Failure()
	if !failed {
		return nil
	}
	var e storev1.Error
	if err := proto.Unmarshal(detail, &e); err != nil {
		e = storev1.Error{Code: int32(codes.Internal), Message: fmt.Sprintf("an undecodable failure in the append ring: %v", err)}
	}
	c.queuedDone(opDone{res: &storev1.OpResult{Error: &e}})
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.asyncErr
}

// ringConsumer is the plugin's end of an append ring: it applies the
// published entries to the store, in order, when the host rings.
type ringConsumer struct {
	r      *shmring.Ring
	st     store.Log
	notify func() error // a notification frame to the host
	failed bool
	view   entryView // the entry AppendAtFrom reads
}

// apply appends data, a ring entry's bytes, at off: with AppendAtFrom and
// a reader whose one view is the entry's bytes where they lie in the ring
// when the store is a store.AppenderFrom (the commitlog store then writes
// them from there and walks their records while they are in the CPU's
// cache, as for a builtin slave's frames, instead of reading them back
// through its mapping later), else with AppendAt. The two are the same
// append by the store contract.
func (rc *ringConsumer) apply(off int64, data []byte) error {
	af, ok := rc.st.(store.AppenderFrom)
	if !ok {
		_, err := rc.st.AppendAt(off, data)
		return err
	}
	rc.view.b = data
	_, err := af.AppendAtFrom(off, len(data), &rc.view)
	rc.view.b = nil
	return err
}

var _ store.Viewer = (*entryView)(nil)

// entryView is an io.Reader and a store.Viewer over bytes in memory: a
// ring entry, valid until the entry is consumed, which is after the
// AppendAtFrom that reads it returns.
type entryView struct{ b []byte }

// Read copies the next bytes into p.
func (e *entryView) Read(p []byte) (int, error) {
	if len(e.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, e.b)
	e.b = e.b[n:]
	return n, nil
}

// View returns the next 1..max bytes where they lie.
func (e *entryView) View(max int) ([]byte, error) {
	if len(e.b) == 0 {
		return nil, io.EOF
	}
	if max <= 0 {
		return nil, nil
	}
	n := min(max, len(e.b))
	v := e.b[:n:n]
	e.b = e.b[n:]
	return v, nil
}

// consume applies every published entry, then says it sleeps (checking
// once more for entries that came meanwhile). An entry the store refuses
// stops the ring: the error goes into the header for the host, which is
// notified. A corrupt ring is an error (the caller closes the channel).
func (rc *ringConsumer) consume() error {
	if rc.failed {
		return nil
	}
	for {
		for {
			off, data, ok, err := rc.r.Next()
			if err != nil {
				return fmt.Errorf("append ring: %w", err)
			}
			if !ok {
				break
			}
			if err := rc.apply(off, data); err != nil {
				rc.failed = true
				detail, merr := proto.Marshal(encodeErrorBounded(err))
				if merr != nil {
					detail = nil
				}
				rc.r.Fail(detail)
				return rc.notify()
			}
			rc.r.Consume()
			if rc.r.NotifyWanted() {
				if err := rc.notify(); err != nil {
					return err
				}
			}
		}
		rc.r.Sleep()
		more, err := rc.r.Pending()
		if err != nil {
			return fmt.Errorf("append ring: %w", err)
		}
		if !more {
			return nil
		}
		rc.r.Awake()
	}
}

// encodeErrorBounded is encodeError with the message cut so that the
// encoded error fits the ring's field.
func encodeErrorBounded(err error) *storev1.Error {
	e := encodeError(err)
	if limit := shmring.MaxErr - 64 - len(e.Reason); len(e.Message) > limit {
		e.Message = e.Message[:max(limit, 0)]
	}
	return e
}

// ringRecv wraps an append side channel's frame reader for a channel with
// a ring: doorbells make it apply the ring, and the end of the stream
// applies what the host had published.
func (rc *ringConsumer) recv(read func() (*storev1.AppendBatch, [][]byte, error)) (*storev1.AppendBatch, [][]byte, error) {
	for {
		b, parts, err := read()
		if errors.Is(err, io.EOF) {
			if cerr := rc.consume(); cerr != nil {
				return nil, nil, cerr
			}
			return nil, nil, err
		}
		if err != nil {
			return nil, nil, err
		}
		if b.Seq == 0 && len(b.Ops) == 0 {
			if err := rc.consume(); err != nil {
				return nil, nil, err
			}
			continue
		}
		return b, parts, nil
	}
}
