package storeplugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/replicatorhq/replicator/sdk/internal/shmring"
	"github.com/replicatorhq/replicator/sdk/proto/storev1"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// ClientConfig tunes the host side of a store plugin. Zero values take the
// defaults.
type ClientConfig struct {
	// BatchBytes closes an append batch once it holds this many bytes
	// (default 256 KiB). A batch also goes out as soon as the stream has
	// room (MaxInFlight), so the batching window is the round trip of the
	// batches already in flight: one caller alone is never delayed.
	BatchBytes int
	// MaxInFlight is the number of append batches sent and not yet acked
	// (default 4).
	MaxInFlight int
	// ChunkBytes is the ReadStream chunk size (default 256 KiB).
	ChunkBytes int
	// TailBytes bounds the newest bytes the host keeps from its own appends
	// (AppendAt's data, the records Append acks bring back) to answer the
	// reads that follow an append without a round trip (default 8 MiB;
	// negative: keep none, every Read goes to ReadStream).
	TailBytes int
	// SyncAppendAt makes every AppendAt wait for the plugin's ack. By
	// default an AppendAt that the host can check itself (at the max
	// offset, inside one segment, on a log that is not empty, no Append
	// awaiting its answer) returns once it is queued: see AppendAt.
	SyncAppendAt bool
	// FrameAppends lets Append frame the record in the host and queue it
	// as an AppendAt, answering without a round trip to the plugin, once
	// the host knows the record's queue offset (see Append). Set it only
	// for a store whose Append waits for nothing but storing the record
	// (no synchronous flush): a framed Append is answered before the
	// plugin holds the record. internal/pluginhost sets it unless the
	// daemon asks for sync flush.
	FrameAppends bool
	// RingBytes is the data area of the shared-memory append ring that a
	// queued AppendAt (a slave's frames) goes through on Linux, between
	// the host and a plugin of this SDK (default 8 MiB, rounded to a
	// multiple of 8 within [64 KiB, 256 MiB]; negative: no ring, the bytes
	// go on the side channel). See ring.go and the package doc.
	RingBytes int
	// DisableSideChannel keeps appends on the gRPC Append stream and reads
	// on ReadStream even when the plugin offers the unix-socket side
	// channels (AppendChannel, ReadChannel).
	DisableSideChannel bool
	// CallTimeout bounds each control-plane call (default 30s).
	CallTimeout time.Duration
	// Logger receives the client's own logs; nil = none.
	Logger hclog.Logger
}

func (c *ClientConfig) defaults() {
	if c.BatchBytes <= 0 {
		c.BatchBytes = 256 << 10
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 4
	}
	if c.ChunkBytes <= 0 {
		c.ChunkBytes = 256 << 10
	}
	if c.TailBytes == 0 {
		c.TailBytes = 8 << 20
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 30 * time.Second
	}
	if c.RingBytes == 0 {
		c.RingBytes = defaultRingBytes
	}
	if c.RingBytes > 0 {
		c.RingBytes = min(max(c.RingBytes&^7, shmring.MinData), shmring.MaxData)
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
}

// Client is an external store plugin seen as a store.Store. Appends from
// any number of goroutines are grouped into batches on one stream and wait
// for their batch's ack; reads come from the tail of bytes the appends
// brought back, else from a read-ahead cache filled by ReadStream; Bounds
// and Watch are served from state the plugin pushes, without a round trip.
// Nothing depends on how the plugin keeps its files.
type Client struct {
	rpc storev1.StoreClient
	cfg ClientConfig
	log hclog.Logger

	ctx    context.Context // background streams; canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	bounds store.Bounds
	seq    uint64
	watch  store.Notifier // Watch; woken outside mu
	dead   error          // set once the plugin is known to be gone
	closed bool

	app        *appender
	tail       *tail // nil: TailBytes < 0
	rd         *streamReader
	noSide     atomic.Bool // the append side channel failed once: use the gRPC stream
	noReadSide atomic.Bool // likewise for ReadChannel: use ReadStream
	noRing     atomic.Bool // the plugin refused the append ring once

	// Queued AppendAt (see AppendAt). wmu orders the check of the max
	// offset with the enqueue.
	wmu      sync.Mutex
	proj     int64 // under mu: max offset including queued AppendAt not yet acked
	appends  int   // under mu: Appends sent and not answered
	asyncErr error // under mu: the first refused queued AppendAt; sticky

	// Framed Append (ClientConfig.FrameAppends), under mu: the next queue
	// offset of each queue, learnt from the plugin's answers to Append and
	// moved on by framed ones (nil after an AppendAt or Truncate: the
	// plugin's bytes may then hold any queue's records), and the largest
	// record the plugin has taken (the host frames none larger, so the
	// plugin's own size limit answers for those).
	qnext     map[queueKey]int64
	maxFramed int
	framed    uint64
	frameBuf  []byte // under wmu: where a framed record is encoded

	tailReads, streamReads atomic.Uint64
}

var (
	_ store.Store        = (*Client)(nil)
	_ store.AppenderFrom = (*Client)(nil)
	_ Flusher            = (*Client)(nil)
)

// Open opens the plugin's store and returns it as a store.Store. Close the
// Client to close the store; the plugin process belongs to whoever started it.
func (c *Conn) Open(ctx context.Context, req OpenRequest, cfg ClientConfig) (*Client, error) {
	cfg.defaults()
	resp, err := c.rpc.Open(ctx, &storev1.OpenRequest{Dir: req.Dir, SegmentSize: req.SegmentSize, Options: req.Options})
	if err != nil {
		return nil, fmt.Errorf("storeplugin: open %q: %w", req.Dir, fromStatus(err))
	}
	bctx, cancel := context.WithCancel(context.Background())
	cl := &Client{rpc: c.rpc, cfg: cfg, log: cfg.Logger, ctx: bctx, cancel: cancel}
	if cfg.TailBytes > 0 {
		cl.tail = newTail(cfg.TailBytes)
	}
	cl.rd = newStreamReader(cl)
	cl.observe(resp.Bounds)
	cl.app = newAppender(cl)
	if err := cl.startWatch(); err != nil {
		cl.app.close()
		cancel()
		cl.wg.Wait()
		cl.app.unmapRings()
		return nil, err
	}
	return cl, nil
}

// observe adopts a bounds snapshot if it is newer than the one held and
// wakes the watchers when the max offset moved.
func (c *Client) observe(p *storev1.Bounds) {
	if p == nil {
		return
	}
	c.mu.Lock()
	if p.Seq <= c.seq && c.seq != 0 {
		c.mu.Unlock()
		return
	}
	old := c.bounds
	c.seq, c.bounds = p.Seq, boundsFromProto(p)
	moved := old.Max != c.bounds.Max
	minUp, newMin := c.bounds.Min > old.Min, c.bounds.Min
	c.mu.Unlock()
	if minUp && c.rd != nil {
		c.rd.trim(newMin)
		if c.tail != nil {
			c.tail.trim(newMin)
		}
	}
	if moved {
		c.watch.Notify()
	}
}

// fail maps an RPC error, remembering a dead plugin.
func (c *Client) fail(err error) error {
	err = fromStatus(err)
	if errors.Is(err, ErrPluginShutdown) {
		c.markDead(err)
	}
	return err
}

func (c *Client) markDead(err error) {
	c.mu.Lock()
	first := c.dead == nil
	if first {
		c.dead = err
	}
	c.mu.Unlock()
	if first {
		c.log.Error("store plugin is gone", "error", err)
		c.watch.Notify()
	}
}

// check returns ErrClosed after Close, ErrPluginShutdown once the plugin
// is gone, and the error of a queued AppendAt the plugin refused.
func (c *Client) check() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return store.ErrClosed
	}
	if c.dead != nil {
		return fmt.Errorf("storeplugin: %w", c.dead)
	}
	return c.asyncErr
}

func (c *Client) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.ctx, c.cfg.CallTimeout)
}

// startWatch opens the Watch stream and follows it in a goroutine until
// Close. The stream ending for another reason means the plugin is gone.
func (c *Client) startWatch() error {
	ws, err := c.rpc.Watch(c.ctx, &storev1.WatchRequest{})
	if err != nil {
		return fmt.Errorf("storeplugin: watch: %w", c.fail(err))
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			b, err := ws.Recv()
			if err != nil {
				if c.ctx.Err() != nil {
					return
				}
				if st, ok := status.FromError(err); ok && st.Code() == codes.Aborted {
					return // the store was closed
				}
				c.markDead(fmt.Errorf("%w: watch stream: %v", ErrPluginShutdown, err))
				return
			}
			c.observe(b)
		}
	}()
	return nil
}

// queueKey names a queue of the store: the next queue offset is kept per
// (topic, queue id).
type queueKey struct {
	topic string
	id    int32
}

// Append stores msg through the batching append stream. If ctx ends first
// Append returns ctx's error, and the message may or may not be stored.
//
// By default Append waits for its batch's ack: the plugin's store assigns
// the record's offset, queue offset and timestamp. With
// ClientConfig.FrameAppends the host frames the record itself (sdk/record,
// the format every store's log holds: a slave's AppendAt takes the same
// bytes) when it knows everything the store would put in it: the offset is
// the max offset (every append goes through this client), the queue offset
// is one past the last the plugin gave this queue (learnt from the plugin's
// answer to an earlier Append, moved on by each framed one), the timestamp
// is the host's clock, the record is no larger than one the plugin has
// taken and leaves room for a filler in its segment, no Append awaits the
// plugin's answer and no AppendAt or Truncate came since. The record then
// goes to the plugin as a queued AppendAt (batched with its neighbours
// into one op), counts in Bounds().Max, and Read serves it from the tail at
// once: a master replicates it and answers its put without waiting for the
// plugin. Otherwise (the first append to a queue, a segment's end, an
// invalid message) Append goes to the plugin and waits, and the plugin's
// answer (its error included) is the result. A framed record the plugin
// refuses makes every later call fail, as a refused queued AppendAt does.
func (c *Client) Append(ctx context.Context, msg *record.Message) (store.AppendResult, error) {
	if msg == nil {
		return store.AppendResult{}, errors.New("storeplugin: nil message")
	}
	if err := c.check(); err != nil {
		return store.AppendResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.AppendResult{}, fmt.Errorf("storeplugin: append: %w", err)
	}
	key := queueKey{msg.Topic, msg.QueueID}
	c.wmu.Lock()
	if c.cfg.FrameAppends && c.tail != nil {
		if res, ok, err := c.appendFramed(key, msg); ok {
			c.wmu.Unlock()
			return res, err
		}
	}
	op := c.messageOp(msg)
	c.mu.Lock()
	c.appends++
	c.mu.Unlock()
	op.after = func(d opDone) { c.appendAnswered(key, d) }
	err := c.app.enqueue(op)
	c.wmu.Unlock()
	if err != nil {
		c.appendAnswered(key, opDone{})
		return store.AppendResult{}, err
	}
	select {
	case d := <-op.done:
		if d.err != nil {
			return store.AppendResult{}, d.err
		}
		return resultFromProto(d.res.Result), decodeError(d.res.Error)
	case <-ctx.Done():
		return store.AppendResult{}, ctx.Err()
	}
}

// messageOp wraps an Append for the append stream.
func (c *Client) messageOp(msg *record.Message) *pendingOp {
	pm := messageToProto(msg)
	body := pm.Body
	pm.Body = nil // travels as the op's payload
	size := len(body) + len(pm.Topic) + 96
	for k, v := range pm.Properties {
		size += len(k) + len(v) + 2
	}
	return &pendingOp{op: &storev1.AppendOp{Op: &storev1.AppendOp_Message{Message: pm}}, data: body, size: size, done: make(chan opDone, 1)}
}

// appendFramed is Append's framed path (see Append); ok=false: ask the
// plugin. Called with wmu held.
func (c *Client) appendFramed(key queueKey, msg *record.Message) (res store.AppendResult, ok bool, err error) {
	size, err := record.Size(msg)
	if err != nil {
		return res, false, nil // the plugin's answer carries its error
	}
	c.mu.Lock()
	b := c.bounds
	cur := max(b.Max, c.proj)
	qo, known := c.qnext[key]
	fits := known && c.appends == 0 && size <= c.maxFramed && b.SegmentSize > 0
	c.mu.Unlock()
	base := b.SegmentStart(cur)
	if !fits || cur-base+int64(size)+record.FillerSize > b.SegmentSize {
		return res, false, nil
	}
	ts := time.Now().UnixMilli()
	enc, err := record.Encode(c.frameBuf[:0], msg, qo, cur, ts)
	if err != nil {
		return res, false, nil
	}
	c.frameBuf = enc
	// The tail's copy is the one the op sends (and grows over the next
	// framed records): out of Read's reach until proj moves below.
	rec := c.tail.copyIn(cur, enc)
	if err := c.app.enqueueRaw(cur, rec, base, c.queuedDone); err != nil {
		c.tail.invalidate()
		return res, true, err
	}
	next := cur + int64(size)
	c.mu.Lock()
	c.proj = next
	c.qnext[key] = qo + 1
	c.framed++
	c.mu.Unlock()
	c.watch.Notify()
	return store.AppendResult{Offset: cur, NextOffset: next, QueueOffset: qo, StoreTimestamp: ts, Size: int32(size)}, true, nil
}

// appendAnswered counts an Append out (answered or never sent) and learns
// the queue's next offset and the size the plugin took from its answer.
func (c *Client) appendAnswered(key queueKey, d opDone) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.appends--
	if d.err != nil || d.res == nil || d.res.Error != nil || d.res.Result == nil {
		return
	}
	r := d.res.Result
	if c.qnext == nil {
		c.qnext = make(map[queueKey]int64)
	}
	c.qnext[key] = r.QueueOffset + 1
	c.maxFramed = max(c.maxFramed, int(r.Size))
}

// startRaw begins an AppendAt or AppendAtFrom: the client must be usable,
// and the learnt queue offsets go (see forgetQueues).
func (c *Client) startRaw() error {
	if err := c.check(); err != nil {
		return err
	}
	c.mu.Lock()
	c.forgetQueues()
	c.mu.Unlock()
	return nil
}

// forgetQueues drops the learnt queue offsets: the log now holds bytes
// that did not come through Append (AppendAt) or lost some (Truncate).
// Called with mu held.
func (c *Client) forgetQueues() {
	if c.qnext != nil {
		c.qnext = nil
	}
}

// AppendAt writes raw bytes at offset; they travel on the append stream,
// batched with whatever else is queued. When the host can check the call
// itself (offset is the max offset it knows, every append goes through it;
// the bytes stay inside one segment; the log is not empty; no Append
// awaits its answer, since that moves the max offset), AppendAt returns as
// soon as the bytes are queued: they count in Bounds().Max and Read serves
// them from the tail at once, and the slave's receive loop does not wait
// for a round trip per frame. They become durable as any store's bytes do,
// when the plugin's flushed offset passes them; a plugin that then
// refuses them (it broke the contract the host checked) makes every later
// call fail with its error. Otherwise, or with SyncAppendAt, AppendAt waits
// for the plugin's answer.
func (c *Client) AppendAt(offset int64, data []byte) (int64, error) {
	if err := c.startRaw(); err != nil {
		return 0, err
	}
	if !c.cfg.SyncAppendAt && c.tail != nil {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		if newMax, ok, err := c.appendAtQueued(offset, data); ok {
			return newMax, err
		}
	}
	return c.appendAtStream(offset, data)
}

// appendAtQueued is AppendAt's queued path; ok=false: wait for the ack.
// Called with wmu held.
func (c *Client) appendAtQueued(offset int64, data []byte) (newMax int64, ok bool, err error) {
	base, ok := c.queueable(offset, len(data))
	if !ok {
		return 0, false, nil
	}
	if used, err := c.app.ringPut(offset, len(data), func(room []byte) error {
		copy(room, data)
		c.tail.copyIn(offset, data)
		return nil
	}); used {
		return c.ringQueued(offset, len(data), err)
	}
	// The tail's copy is the one the op sends; it is out of Read's reach
	// (above Bounds().Max) until proj moves below.
	return c.queueRaw(offset, base, c.tail.copyIn(offset, data))
}

// queueable reports whether an AppendAt of n bytes at offset may be
// queued (see AppendAt) and the start of its segment. Called with wmu held.
func (c *Client) queueable(offset int64, n int) (base int64, ok bool) {
	c.mu.Lock()
	b := c.bounds
	cur := max(b.Max, c.proj)
	busy := c.appends > 0
	c.mu.Unlock()
	if busy || n <= 0 || b.SegmentSize <= 0 || offset != cur || cur == b.Min {
		return 0, false
	}
	base = b.SegmentStart(offset)
	if offset-base+int64(n) > b.SegmentSize {
		return 0, false // the plugin answers ErrSegmentOverflow
	}
	return base, true
}

// queueRaw queues own, the tail's copy of an AppendAt's bytes at offset
// (in the segment at base), and moves the max offset over it. Called with
// wmu held.
func (c *Client) queueRaw(offset, base int64, own []byte) (newMax int64, ok bool, err error) {
	if err := c.app.enqueueRaw(offset, own, base, c.queuedDone); err != nil {
		c.tail.invalidate()
		return 0, true, err
	}
	newMax = offset + int64(len(own))
	c.mu.Lock()
	c.proj = newMax
	c.mu.Unlock()
	c.watch.Notify()
	return newMax, true, nil
}

// ringQueued finishes a queued AppendAt that went into the append ring:
// as queueRaw, the max offset moves over it, or on err the tail forgets
// what it may hold of the call (its bytes were copied in, unpublished).
func (c *Client) ringQueued(offset int64, n int, err error) (newMax int64, ok bool, rerr error) {
	if err != nil {
		c.tail.invalidate()
		return 0, true, err
	}
	newMax = offset + int64(n)
	c.mu.Lock()
	c.proj = newMax
	c.mu.Unlock()
	c.watch.Notify()
	return newMax, true, nil
}

// queuedDone records the plugin's answer to a queued AppendAt.
func (c *Client) queuedDone(d opDone) {
	err := d.err
	if err == nil {
		err = decodeError(d.res.Error)
	}
	if err == nil {
		return
	}
	c.mu.Lock()
	first := c.asyncErr == nil
	if first {
		c.asyncErr = fmt.Errorf("storeplugin: queued AppendAt: %w", err)
	}
	c.mu.Unlock()
	if first {
		c.log.Error("the plugin refused a queued AppendAt; the store is unusable", "error", err)
		c.watch.Notify()
	}
}

// AppendAtFrom is AppendAt with the bytes read from r (store.AppenderFrom):
// a slave's receive loop hands it each frame body on the socket, and the
// bytes land in the tail block the queued op sends from (one copy less
// than AppendAt from the loop's buffer). The tail's room is filled before
// anything moves: if r fails, Bounds, Read and the plugin see nothing of
// the call and the error wraps r's. When the call cannot be queued (see
// AppendAt), the bytes are read into a buffer of their own and the plugin
// answers, as for AppendAt.
func (c *Client) AppendAtFrom(offset int64, n int, r io.Reader) (int64, error) {
	if n < 0 {
		return 0, fmt.Errorf("storeplugin: append at %d from a reader: %d bytes", offset, n)
	}
	if err := c.startRaw(); err != nil {
		return 0, err
	}
	if !c.cfg.SyncAppendAt && c.tail != nil {
		// Held to the end, as in AppendAt: the tail's room stays this
		// call's until commit, and a waiting AppendAt's bytes reach the
		// tail (adopt) before the next call reserves.
		c.wmu.Lock()
		defer c.wmu.Unlock()
		if base, ok := c.queueable(offset, n); ok {
			// Not copied into the tail (fresh tail blocks cost a page
			// fault per 4 KiB): a Read of these bytes applies the ring
			// and reads them from the plugin.
			if used, err := c.app.ringPut(offset, n, func(room []byte) error {
				_, err := io.ReadFull(r, room)
				return err
			}); used {
				if err != nil {
					err = fmt.Errorf("storeplugin: append at %d: %w", offset, err)
				}
				newMax, _, err := c.ringQueued(offset, n, err)
				return newMax, err
			}
			own := c.tail.reserve(offset, n)
			if _, err := io.ReadFull(r, own); err != nil {
				return 0, fmt.Errorf("storeplugin: append at %d: %w", offset, err)
			}
			newMax, _, err := c.queueRaw(offset, base, c.tail.commit(offset, own))
			return newMax, err
		}
	}
	data := make([]byte, n) // n is bounded by the caller's frame limit
	if _, err := io.ReadFull(r, data); err != nil {
		return 0, fmt.Errorf("storeplugin: append at %d: %w", offset, err)
	}
	return c.appendAtStreamOwned(offset, data)
}

func (c *Client) appendAtStream(offset int64, data []byte) (int64, error) {
	return c.appendAtStreamOwned(offset, bytes.Clone(data))
}

// appendAtStreamOwned sends an AppendAt of data (the host's own copy) and
// waits for the plugin's answer.
func (c *Client) appendAtStreamOwned(offset int64, data []byte) (int64, error) {
	raw := &storev1.RawAppend{Offset: offset}
	op := &pendingOp{op: &storev1.AppendOp{Op: &storev1.AppendOp_Raw{Raw: raw}}, data: data, size: len(data) + 16, done: make(chan opDone, 1)}
	if err := c.app.enqueue(op); err != nil {
		return 0, err
	}
	d := <-op.done
	if d.err != nil {
		return 0, d.err
	}
	if err := decodeError(d.res.Error); err != nil {
		return d.res.MaxOffset, err
	}
	return d.res.MaxOffset, nil
}

// Read returns a view of at most max bytes at offset, never crossing a
// segment end, from the tail of the host's own appends or the read-ahead
// cache. A view needs no Release to stay valid (its bytes are the host's);
// releasing it lets the read-ahead chunk behind it be reused.
func (c *Client) Read(offset int64, max int) (store.View, error) {
	if err := c.check(); err != nil {
		return store.View{}, err
	}
	b := c.Bounds()
	if offset < b.Min || offset > b.Max {
		return store.View{}, fmt.Errorf("storeplugin: read at %d outside [%d, %d]: %w", offset, b.Min, b.Max, store.ErrOffsetOutOfRange)
	}
	if offset == b.Max || max <= 0 {
		return store.View{Offset: offset}, nil
	}
	base := b.SegmentStart(offset)
	end := min(b.Max, offset+int64(max))
	if b.SegmentSize > 0 {
		end = min(end, base+b.SegmentSize)
	}
	if c.tail != nil {
		if v, ok := c.tail.read(offset, end); ok {
			c.tailReads.Add(1)
			return v, nil
		}
	}
	c.streamReads.Add(1)
	c.app.drainRing() // bytes the ring holds reach the plugin first
	return c.rd.read(offset, end)
}

// ReadMessages decodes records with one unary call (a control-plane read).
func (c *Client) ReadMessages(offset int64, n int) ([]record.Record, int64, error) {
	if err := c.check(); err != nil {
		return nil, 0, err
	}
	c.app.drain() // queued appends reach the plugin first
	ctx, cancel := c.callCtx()
	defer cancel()
	r, err := c.rpc.ReadMessages(ctx, &storev1.ReadMessagesRequest{Offset: offset, N: int32(min(n, maxReadMessages))})
	if err != nil {
		return nil, 0, fmt.Errorf("storeplugin: read messages at %d: %w", offset, c.fail(err))
	}
	recs := make([]record.Record, len(r.Records))
	for i, p := range r.Records {
		recs[i] = recordFromProto(p)
	}
	return recs, r.Next, nil
}

// Bounds returns the latest bounds the plugin reported, moved on by the
// queued AppendAt it has not acked yet. It never blocks on the plugin: the
// max offset is exact (every append and truncate goes through this
// client), the flushed offset trails by at most a few tens of milliseconds.
func (c *Client) Bounds() store.Bounds {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.bounds
	if c.proj > b.Max { // queued AppendAt not acked yet: they may have started a segment
		b.LastSegmentStart = max(b.LastSegmentStart, b.SegmentStart(c.proj-1))
		b.Max = c.proj
	}
	return b
}

// Truncate cuts the log back to offset.
func (c *Client) Truncate(offset int64) error {
	if err := c.check(); err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.app.drain()
	if err := c.check(); err != nil {
		return err
	}
	c.mu.Lock()
	c.forgetQueues()
	c.mu.Unlock()
	ctx, cancel := c.callCtx()
	defer cancel()
	b, err := c.rpc.Truncate(ctx, &storev1.TruncateRequest{Offset: offset})
	c.rd.invalidate()
	if c.tail != nil {
		c.tail.invalidate()
	}
	if err != nil {
		return fmt.Errorf("storeplugin: truncate to %d: %w", offset, c.fail(err))
	}
	c.mu.Lock()
	c.proj = 0
	c.mu.Unlock()
	c.observe(b)
	return nil
}

// Flush asks the plugin to make every written byte durable (its Flusher).
func (c *Client) Flush() error {
	if err := c.check(); err != nil {
		return err
	}
	c.app.drain()
	if err := c.check(); err != nil {
		return err
	}
	ctx, cancel := c.callCtx()
	defer cancel()
	b, err := c.rpc.Flush(ctx, &storev1.FlushRequest{})
	if err != nil {
		return fmt.Errorf("storeplugin: flush: %w", c.fail(err))
	}
	c.observe(b)
	return nil
}

// Watch registers ch for a non-blocking send whenever the max offset
// changes, and once when the plugin is found gone.
func (c *Client) Watch(ch chan<- struct{}) (cancel func()) {
	return c.watch.Watch(ch)
}

// Close drains the append stream and closes the plugin's store.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return store.ErrClosed
	}
	c.closed = true
	dead := c.dead
	c.mu.Unlock()

	c.app.close()
	var err error
	if dead == nil {
		ctx, cancel := c.callCtx()
		_, rerr := c.rpc.Close(ctx, &storev1.CloseRequest{})
		cancel()
		if rerr != nil {
			err = fmt.Errorf("storeplugin: close: %w", fromStatus(rerr))
		}
	} else {
		err = fmt.Errorf("storeplugin: close: %w", dead)
	}
	c.cancel()
	c.wg.Wait()
	c.app.unmapRings()
	c.rd.invalidate()
	if c.tail != nil {
		c.tail.invalidate()
	}
	return err
}
