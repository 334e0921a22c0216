package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/replicatorhq/replicator/sdk/proto/producerv1"

	"github.com/replicatorhq/replicator/internal/producerwire"
)

// run opens a stream to the current target whenever messages are queued,
// and moves to another node when the stream cannot open or a node says it
// is not the master.
func (p *Producer) run() {
	defer close(p.runDone)
	backoff := time.Duration(0)
	hops := 0 // redirects followed since a node last stored a message
	for {
		if !p.waitQueued() {
			return
		}
		p.mu.Lock()
		hp := p.addrs[p.cur]
		p.mu.Unlock()
		out := p.session(hp)
		if out.stored {
			backoff, hops = 0, 0
		}
		switch {
		case out.next != "":
			// A slave named its master: go there at once, unless the
			// redirects went round every address without a node storing
			// a message (during a role change two nodes can name each
			// other): then with the growing pause.
			p.mu.Lock()
			p.cur = p.addAddrLocked(out.next, p.secure[hp] || p.opts.tls != nil)
			n := len(p.addrs)
			p.mu.Unlock()
			p.log.Info("following the master", "from", hp, "to", out.next)
			if hops++; hops > n && !p.pause(&backoff) {
				return
			}
			continue
		case out.ok:
			backoff = 0
			continue
		}
		// The node could not take the messages: try the next address,
		// with a growing pause once every address has failed in a row.
		p.mu.Lock()
		p.cur = (p.cur + 1) % len(p.addrs)
		wrapped := p.cur == 0
		p.mu.Unlock()
		p.failQueued(false, func(*Future) *PutError {
			return &PutError{Storage: NotStored, Kind: out.kind, Node: hp, Message: out.msg}
		})
		if (wrapped || len(p.addrs) == 1) && !p.pause(&backoff) {
			return
		}
	}
}

// pause grows *backoff (minBackoff to maxBackoff) and waits that long;
// false when the producer closed meanwhile.
func (p *Producer) pause(backoff *time.Duration) bool {
	*backoff = min(max(2**backoff, minBackoff), maxBackoff)
	t := time.NewTimer(*backoff)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.closeCh:
		return false
	}
}

// waitQueued waits until messages are queued; false when the producer
// closed.
func (p *Producer) waitQueued() bool {
	for {
		p.mu.Lock()
		n := len(p.queue)
		p.mu.Unlock()
		if n > 0 {
			return true
		}
		select {
		case <-p.wake:
		case <-p.closeCh:
			return false
		}
	}
}

// sessionEnd says how a stream ended.
type sessionEnd struct {
	ok     bool   // ended cleanly (idle, or drained with every message answered)
	stored bool   // the node stored at least one message on this stream
	next   string // a slave's master to go to
	kind   error  // why queued messages were not taken (not ok)
	msg    string
}

// session is one stream to hp.
type session struct {
	p      *Producer
	hp     string
	stream producerv1.Producer_PutClient
	cancel context.CancelFunc

	mu         sync.Mutex
	inflight   map[uint64]*Future
	seq        uint64
	stop       chan struct{} // writer: stop sending, half-close
	stopOnce   sync.Once
	next       string // redirect target
	redirected bool
	stored     bool          // a result said stored
	open       int           // batches sent and not wholly answered
	room       chan struct{} // an open batch closed (cap 1)
	// idle is how long the writer waits without a batch to send before it
	// closes the stream (nanoseconds; lowered by the node's headers).
	idle atomic.Int64
	// lastSent is when the last batch left (UnixNano); batches counts them.
	lastSent atomic.Int64
	batches  atomic.Uint64

	// sendMu is held by whoever sends on the stream: the writer, or a
	// Send that finds the stream idle (sendNow). It guards the fields
	// below.
	sendMu sync.Mutex
	done   bool // the stream failed or was half-closed: send nothing more
	last   int  // the size of the previous batch
	batch  []*Future
	req    requestBatch

	// relCost and relN: what the reader's current response resolved.
	relCost int64
	relN    int
}

// batchRef counts the messages of a sent batch without an answer.
type batchRef struct{ left int }

func (p *Producer) session(hp string) sessionEnd {
	cc, err := p.conn(hp)
	if err != nil {
		return sessionEnd{kind: ErrUnavailable, msg: err.Error()}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if p.opts.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+p.opts.token)
	}
	stream, err := producerv1.NewProducerClient(cc).Put(ctx)
	if err != nil {
		return sessionEnd{kind: ErrUnavailable, msg: fmt.Sprintf("opening the stream: %v", err)}
	}
	s := &session{p: p, hp: hp, stream: stream, cancel: cancel, inflight: map[uint64]*Future{}, stop: make(chan struct{}), room: make(chan struct{}, 1)}
	s.idle.Store(int64(p.opts.idleTimeout))
	s.lastSent.Store(time.Now().UnixNano())
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		s.writer()
	}()
	p.active.Store(s)
	rerr := s.reader()
	p.active.Store(nil)
	s.halt()
	cancel()
	<-wdone
	return s.finish(rerr)
}

func (s *session) halt() { s.stopOnce.Do(func() { close(s.stop) }) }

// writer sends queued messages in batches until halted or the stream
// fails, then half-closes the stream.
func (s *session) writer() {
	p := s.p
	for {
		if !s.waitWork() || !s.waitRoom() {
			s.sendMu.Lock()
			if !s.done {
				s.done = true
				s.stream.CloseSend()
			}
			s.sendMu.Unlock()
			return
		}
		if p.opts.linger > 0 {
			s.linger()
		} else {
			s.sendMu.Lock()
			last := s.last
			s.sendMu.Unlock()
			if last > 1 && p.queued() < last/2 {
				// The senders of the batch just answered are waking up:
				// let them queue before this batch leaves.
				runtime.Gosched()
			}
		}
		s.sendMu.Lock()
		ok := !s.done && s.sendLocked()
		s.sendMu.Unlock()
		if !ok {
			// The reader sees the stream's error and settles the batch.
			return
		}
	}
}

// sendNow sends the queue from the calling goroutine (a Send) when the
// stream is idle: no batch open, nobody sending, the previous batch a
// lone message, no linger. A lone producer's message then leaves without
// waking the writer. False when it did not send (the writer must).
func (s *session) sendNow() bool {
	if s.p.opts.linger > 0 || !s.sendMu.TryLock() {
		return false
	}
	defer s.sendMu.Unlock()
	s.mu.Lock()
	open := s.open
	s.mu.Unlock()
	if s.done || open > 0 || s.last > 1 || isClosed(s.stop) {
		return false
	}
	s.sendLocked()
	return true
}

// sendLocked sends a batch of the queued messages; the caller holds
// sendMu. False when the stream failed (the reader then settles what was
// sent).
func (s *session) sendLocked() bool {
	p := s.p
	batch := p.takeBatch(s.batch[:0])
	s.batch = batch
	if len(batch) == 0 {
		return true
	}
	s.last = len(batch)
	ref := &batchRef{left: len(batch)}
	s.mu.Lock()
	s.open++
	for _, f := range batch {
		f.batch = ref
		s.seq++
		f.msg.seq = s.seq
		s.inflight[s.seq] = f
	}
	s.mu.Unlock()
	s.req.fs = batch
	err := s.stream.SendMsg(&s.req)
	s.req.fs = nil
	clear(batch)
	s.lastSent.Store(time.Now().UnixNano())
	s.batches.Add(1)
	if err != nil {
		s.done = true
		return false
	}
	return true
}

// waitRoom waits until fewer than the maximum batches are open; false when
// halted.
func (s *session) waitRoom() bool {
	for {
		s.mu.Lock()
		open := s.open
		s.mu.Unlock()
		if open < s.p.opts.maxBatches {
			return true
		}
		select {
		case <-s.room:
		case <-s.stop:
			return false
		}
	}
}

// answered counts f's answer against its batch.
func (s *session) answeredLocked(f *Future) {
	if f.batch == nil {
		return
	}
	f.batch.left--
	if f.batch.left == 0 {
		s.open--
		select {
		case s.room <- struct{}{}:
		default:
		}
	}
	f.batch = nil
}

// waitWork waits for queued messages; false when halted, closing with
// nothing queued, or when nothing was sent for the idle timeout since
// the last batch (the stream then ends, cleanly, before the node's idle
// close).
func (s *session) waitWork() bool {
	p := s.p
	var (
		idle      <-chan time.Time
		armed     int64  // the idle timeout idle was armed for
		sentAtArm uint64 // batches sent when it was armed
		stopIdle  = func() bool { return false }
	)
	defer func() { stopIdle() }()
	for {
		select {
		case <-s.stop:
			return false
		default:
		}
		p.mu.Lock()
		n := len(p.queue)
		p.mu.Unlock()
		if n > 0 {
			return true
		}
		if to := s.idle.Load(); idle == nil || to != armed {
			stopIdle()
			d := time.Duration(to) - time.Since(time.Unix(0, s.lastSent.Load()))
			if d <= 0 {
				p.log.Debug("closing the idle producer stream", "node", s.hp)
				return false
			}
			idle, stopIdle = p.opts.newTimer(d)
			armed, sentAtArm = to, s.batches.Load()
		}
		select {
		case <-p.wake:
		case <-s.stop:
			return false
		case <-p.closeCh:
			return false
		case <-idle:
			// A Send may have sent a batch itself meanwhile (sendNow):
			// the timer is armed again from that batch.
			if s.batches.Load() != sentAtArm {
				stopIdle()
				idle = nil
				continue
			}
			p.log.Debug("closing the idle producer stream", "node", s.hp)
			return false
		}
	}
}

// linger waits up to the linger time for a full batch.
func (s *session) linger() {
	p := s.p
	t := time.NewTimer(p.opts.linger)
	defer t.Stop()
	for {
		p.mu.Lock()
		n, bytes := 0, 0
		for _, f := range p.queue {
			if f.state.Load() == stQueued {
				n++
				bytes += len(f.msg.body)
			}
		}
		p.mu.Unlock()
		if n >= p.opts.maxBatchMessages || bytes >= p.opts.maxBatchBytes {
			return
		}
		select {
		case <-t.C:
			return
		case <-p.wake:
		case <-s.stop:
			return
		}
	}
}

// queued is the length of the queue.
func (p *Producer) queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}

// takeBatch moves queued messages, up to the batch caps, into batch and
// marks them sent.
func (p *Producer) takeBatch(batch []*Future) []*Future {
	p.mu.Lock()
	defer p.mu.Unlock()
	bytes, i := 0, 0
	for ; i < len(p.queue); i++ {
		f := p.queue[i]
		if len(batch) > 0 && (len(batch) >= p.opts.maxBatchMessages || bytes+len(f.msg.body) > p.opts.maxBatchBytes) {
			break
		}
		if !f.state.CompareAndSwap(stQueued, stSent) {
			continue // cancelled
		}
		batch = append(batch, f)
		bytes += len(f.msg.body)
	}
	n := copy(p.queue, p.queue[i:])
	clear(p.queue[n:])
	p.queue = p.queue[:n]
	if n > 0 {
		// More is queued than this batch took: wake the writer again.
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
	return batch
}

// reader receives results until the stream ends.
func (s *session) reader() error {
	// The node's headers say when it ends an idle stream: close first.
	if md, err := s.stream.Header(); err == nil {
		if v := md.Get(producerv1.IdleTimeoutMetadata); len(v) > 0 {
			if ms, err := strconv.ParseInt(v[0], 10, 64); err == nil && ms > 0 {
				if d := time.Duration(ms) * time.Millisecond / 2; d < time.Duration(s.idle.Load()) {
					s.idle.Store(int64(d))
					s.p.signal() // the writer re-arms its idle timer
				}
			}
		}
	}
	var resp responseBatch
	for {
		clear(resp.rs)
		resp.rs = resp.rs[:0]
		if err := s.stream.RecvMsg(&resp); err != nil {
			return err
		}
		var retry []*Future
		s.relCost, s.relN = 0, 0
		for i := range resp.rs {
			r := &resp.rs[i]
			s.mu.Lock()
			f := s.inflight[r.Sequence]
			delete(s.inflight, r.Sequence)
			if f != nil {
				s.answeredLocked(f)
			}
			s.mu.Unlock()
			if f == nil {
				continue // not ours: ignore rather than trust it
			}
			if again := s.settle(f, r); again {
				retry = append(retry, f)
			}
		}
		if s.relN > 0 {
			s.p.completed(s.relCost, s.relN)
		}
		if len(retry) > 0 {
			s.p.requeue(retry)
		}
	}
}

// settle completes f with r, or reports that f must be sent again (the
// node certainly did not store it and another node may).
func (s *session) settle(f *Future, r *producerwire.Result) bool {
	switch producerv1.Storage(r.Storage) {
	case producerv1.Storage_STORAGE_STORED:
		s.mu.Lock()
		s.stored = true
		s.mu.Unlock()
		s.resolve(f, Result{
			Status: statusOf(producerv1.Status(r.Status)), Offset: r.Offset, NextOffset: r.NextOffset,
			QueueOffset: r.QueueOffset, Node: s.hp, Epoch: r.Epoch, BrokerID: r.BrokerID,
		}, nil)
		return false
	case producerv1.Storage_STORAGE_NOT_STORED:
		e := &PutError{Storage: NotStored, Node: s.hp, Message: r.Message}
		switch producerv1.Error(r.Error) {
		case producerv1.Error_ERROR_INVALID_MESSAGE:
			e.Kind = ErrInvalidMessage
		case producerv1.Error_ERROR_TOO_LARGE:
			e.Kind = ErrTooLarge
		case producerv1.Error_ERROR_NO_SPACE:
			e.Kind = ErrNoSpace
		case producerv1.Error_ERROR_SLAVE_WRITE_PROTECTED, producerv1.Error_ERROR_NOT_MASTER, producerv1.Error_ERROR_UNAVAILABLE:
			// A slave or a demoted master (that may name the master), or
			// a node that knows no master yet (an election): the master
			// named, else the next address, with a pause once every
			// address refused in a row.
			e.Kind = ErrNoMaster
			if s.p.opts.noFollow {
				break
			}
			f.lastErr = e
			s.redirect(r.MasterAPI)
			return true
		case producerv1.Error_ERROR_SHUTTING_DOWN:
			e.Kind = ErrUnavailable
			f.lastErr = e
			s.redirect("")
			return true
		default:
			e.Kind = ErrInternal
		}
		s.resolve(f, Result{}, e)
		return false
	}
	kind := ErrInternal
	if producerv1.Error(r.Error) == producerv1.Error_ERROR_FENCED {
		kind = ErrFenced
	}
	s.resolve(f, Result{}, &PutError{Storage: MaybeStored, Kind: kind, Node: s.hp, Message: r.Message, Offset: r.Offset})
	return false
}

// resolve resolves f for the reader, which gives back the in-flight
// bytes and counts of a response's futures at once (relCost, relN).
func (s *session) resolve(f *Future, res Result, err error) {
	if f.resolve(res, err) {
		s.relCost += f.cost
		s.relN++
	}
}

// redirect ends the stream gracefully (the node answers what it took)
// and names where to go next ("": the next address).
func (s *session) redirect(masterAPI string) {
	s.mu.Lock()
	s.redirected = true
	if s.next == "" && masterAPI != "" {
		if hp, _, err := parseAddr(masterAPI); err == nil && hp != s.hp {
			s.next = hp
		}
	}
	s.mu.Unlock()
	s.halt()
}

// finish settles what the stream left: messages sent without an answer may
// be stored, unless the node refused the stream itself.
func (s *session) finish(rerr error) sessionEnd {
	s.mu.Lock()
	left := make([]*Future, 0, len(s.inflight))
	for _, f := range s.inflight {
		left = append(left, f)
	}
	clear(s.inflight)
	next, stopped, stored := s.next, s.redirected, s.stored
	s.mu.Unlock()
	end := s.end(rerr, left, next, stopped)
	end.stored = stored
	return end
}

// end settles the messages left without an answer and says how the
// stream ended.
func (s *session) end(rerr error, left []*Future, next string, stopped bool) sessionEnd {
	code := status.Code(rerr)
	msg := ""
	if rerr != nil && !errors.Is(rerr, io.EOF) {
		msg = status.Convert(rerr).Message()
	}
	switch {
	case code == codes.Unauthenticated || code == codes.PermissionDenied:
		// Refused before the handler ran: nothing was stored.
		for _, f := range left {
			f.complete(Result{}, &PutError{Storage: NotStored, Kind: ErrUnauthenticated, Node: s.hp, Message: msg})
		}
		s.p.failQueued(true, func(f *Future) *PutError {
			return &PutError{Storage: NotStored, Kind: ErrUnauthenticated, Node: s.hp, Message: msg}
		})
		s.p.log.Error("the node refused the producer's token", "node", s.hp, "error", msg)
		return sessionEnd{kind: ErrUnauthenticated, msg: msg}
	case code == codes.Unimplemented || code == codes.NotFound:
		for _, f := range left {
			f.complete(Result{}, &PutError{Storage: NotStored, Kind: ErrProtocol, Node: s.hp, Message: msg})
		}
		return sessionEnd{kind: ErrProtocol, msg: "the node does not serve the producer stream: " + msg}
	}
	for _, f := range left {
		f.complete(Result{}, &PutError{Storage: MaybeStored, Kind: ErrUnavailable, Node: s.hp,
			Message: "the stream ended before the node answered: " + describe(rerr)})
	}
	if len(left) > 0 {
		s.p.log.Warn("producer stream ended with messages unanswered; they may be stored", "node", s.hp, "messages", len(left), "error", describe(rerr))
	}
	switch {
	case next != "":
		return sessionEnd{next: next}
	case stopped:
		// A slave or demoted master that named no master, or a node
		// shutting down: the next address.
		return sessionEnd{kind: ErrNoMaster, msg: "the node is not the master or is shutting down"}
	case rerr == nil, errors.Is(rerr, io.EOF), code == codes.DeadlineExceeded:
		// Closed by the producer, or idle for the node's idle timeout.
		return sessionEnd{ok: true}
	}
	return sessionEnd{kind: ErrUnavailable, msg: describe(rerr)}
}

func describe(err error) string {
	if err == nil || errors.Is(err, io.EOF) {
		return "closed by the node"
	}
	if s, ok := status.FromError(err); ok {
		return s.Code().String() + ": " + s.Message()
	}
	return err.Error()
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func statusOf(s producerv1.Status) Status {
	switch s {
	case producerv1.Status_FLUSH_DISK_TIMEOUT:
		return FlushDiskTimeout
	case producerv1.Status_FLUSH_SLAVE_TIMEOUT:
		return FlushSlaveTimeout
	case producerv1.Status_SLAVE_NOT_AVAILABLE:
		return SlaveNotAvailable
	}
	return PutOK
}

// requestBatch is a PutRequest of queued messages (producerwire.Marshaler:
// encoded straight from the futures).
type requestBatch struct{ fs []*Future }

func (r *requestBatch) Size() int {
	n := 0
	for _, f := range r.fs {
		m := &f.msg
		n += producerwire.SizeRequestMessage(m.seq, m.topic, m.queueID, m.body, m.props)
	}
	return n
}

func (r *requestBatch) AppendTo(b []byte) []byte {
	for _, f := range r.fs {
		m := &f.msg
		b = producerwire.AppendRequestMessage(b, m.seq, m.topic, m.queueID, m.body, m.props)
	}
	return b
}

// responseBatch is a received PutResponse (producerwire.Unmarshaler).
type responseBatch struct{ rs []producerwire.Result }

func (r *responseBatch) UnmarshalBuffers(data mem.BufferSlice) error {
	buf := producerwire.Hold(data)
	defer buf.Free()
	var err error
	if r.rs, err = producerwire.DecodeResponse(buf.ReadOnlyData(), r.rs); err != nil {
		return fmt.Errorf("client: a response of the node: %w", err)
	}
	return nil
}
