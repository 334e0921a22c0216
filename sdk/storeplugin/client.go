package storeplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	// ReadAheadBytes is what one ReadStream call fetches when the plugin
	// does not share its files (default 1 MiB).
	ReadAheadBytes int
	// ChunkBytes is the ReadStream chunk size (default 256 KiB).
	ChunkBytes int
	// DisableMmap reads through ReadStream even when the plugin shares its
	// segment files (it also disables in-place appends).
	DisableMmap bool
	// DisableInPlace sends AppendAt's bytes on the append stream and waits
	// for the plugin's ack, even when the plugin shares its files.
	DisableInPlace bool
	// DisableHostAppends sends every Append to the plugin and waits for its
	// answer, even when the plugin takes host writes into its shared files
	// (see hostappend.go).
	DisableHostAppends bool
	// DisableSideChannel keeps appends on the gRPC Append stream even when
	// the plugin offers the unix-socket side channel (AppendChannel).
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
	if c.ReadAheadBytes <= 0 {
		c.ReadAheadBytes = 1 << 20
	}
	if c.ChunkBytes <= 0 {
		c.ChunkBytes = 256 << 10
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
}

// Client is an external store plugin seen as a store.Store. Appends from
// any number of goroutines are grouped into batches on one stream; reads come
// from the plugin's segment files mapped read-only when it shares them, else
// from a read-ahead cache filled by ReadStream; Bounds and Watch are served
// from state the plugin pushes, without a round trip.
type Client struct {
	rpc    storev1.StoreClient
	cfg    ClientConfig
	log    hclog.Logger
	shares bool

	ctx    context.Context // background streams; canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	bounds store.Bounds
	seq    uint64
	watch  store.Notifier // Watch; woken outside mu
	dead   error          // set once the plugin is known to be gone
	closed bool

	// Segment geometry at Open, for merging in-place ops: every segment
	// starts at segAnchor plus a multiple of segSize (0: do not merge).
	segSize, segAnchor int64

	app    *appender
	rd     reader
	noSide atomic.Bool // the side channel failed once: use the gRPC stream

	// In-place appends (see AppendAt).
	inplace  bool
	proj     int64 // under mu: max offset including in-place appends not yet acked
	asyncErr error // under mu: the first failed in-place append; sticky
	wmu      sync.Mutex
	wfiles   map[int64]*os.File // under wmu: segment files open for writing

	// Host-encoded appends (hostappend.go).
	hostOn       bool               // host-encoded appends configured (set by Open)
	hostAppends  bool               // under mu: still on (a failed batch turns them off)
	maxRecord    int                // records above go to the plugin
	queues       map[queueKey]int64 // under mu: next queue offsets learned
	pendingSlow  int                // under mu: Appends sent to the plugin, not answered
	encBuf       []byte             // under wmu
	hostAppended atomic.Uint64
}

var (
	_ store.Store = (*Client)(nil)
	_ Flusher     = (*Client)(nil)
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
	cl := &Client{
		rpc:    c.rpc,
		cfg:    cfg,
		log:    cfg.Logger,
		shares: resp.SharesFiles && !cfg.DisableMmap && mmapSupported,
		ctx:    bctx,
		cancel: cancel,
	}
	cl.observe(resp.Bounds)
	cl.segSize, cl.segAnchor = cl.bounds.SegmentSize, cl.bounds.LastSegmentStart
	if cl.shares {
		cl.rd = newMmapReader(cl)
		cl.inplace = !cfg.DisableInPlace && !resp.NoHostWrites
		cl.wfiles = map[int64]*os.File{}
		if on, maxRec := hostAppendConfig(req); on && cl.inplace && !cfg.DisableHostAppends {
			cl.hostOn, cl.hostAppends, cl.maxRecord = true, true, maxRec
			cl.queues = map[queueKey]int64{}
		}
	} else {
		cl.rd = newStreamReader(cl)
	}
	cl.app = newAppender(cl)
	if err := cl.startWatch(); err != nil {
		cl.app.close()
		cancel()
		cl.wg.Wait()
		return nil, err
	}
	return cl, nil
}

// SharesFiles reports whether reads come from the plugin's files mapped
// read-only (true) or from ReadStream (false).
func (c *Client) SharesFiles() bool { return c.shares }

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
// is gone, and the error of a refused in-place append.
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

// Append stores msg through the batching append stream. If ctx ends first
// Append returns ctx's error, and the message may or may not be stored.
func (c *Client) Append(ctx context.Context, msg *record.Message) (store.AppendResult, error) {
	if msg == nil {
		return store.AppendResult{}, errors.New("storeplugin: nil message")
	}
	if err := c.check(); err != nil {
		return store.AppendResult{}, err
	}
	var op *pendingOp
	if c.hostOn {
		c.wmu.Lock()
		res, done, err := c.appendEncoded(ctx, msg)
		if done {
			c.wmu.Unlock()
			return res, err
		}
		// Still under wmu: no host-encoded append can slip in between the
		// count and the enqueue (its offset would be this record's).
		op = c.messageOp(msg)
		op.hook = c.slowAppendDone(queueKey{msg.Topic, msg.QueueID})
		c.mu.Lock()
		c.pendingSlow++
		c.mu.Unlock()
		err = c.app.enqueue(op)
		c.wmu.Unlock()
		if err != nil {
			c.mu.Lock()
			c.pendingSlow--
			c.mu.Unlock()
			return store.AppendResult{}, err
		}
	} else {
		op = c.messageOp(msg)
		if err := c.app.enqueue(op); err != nil {
			return store.AppendResult{}, err
		}
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
	size := len(pm.Body) + len(pm.Topic) + 96
	for k, v := range pm.Properties {
		size += len(k) + len(v) + 2
	}
	return &pendingOp{op: &storev1.AppendOp{Op: &storev1.AppendOp_Message{Message: pm}}, size: size, done: make(chan opDone, 1)}
}

// AppendAt writes raw bytes at offset. When the plugin shares its files and
// the segment already exists, the host writes the bytes into the segment
// file itself (pwrite: they are in the page cache, as an in-process mmap
// store's would be, and readable at once), tells the plugin on the append
// stream to take them, and returns without waiting: the slave's path costs
// no round trip. An in-place append the plugin then refuses fails every
// later call. Otherwise the bytes travel on the append stream and AppendAt
// waits for the ack.
func (c *Client) AppendAt(offset int64, data []byte) (int64, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	if c.inplace {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		if c.hostOn {
			c.forgetQueues() // raw bytes may hold any queue's records
		}
		if max, done, err := c.appendInPlace(offset, data); done {
			return max, err
		}
	}
	max, err := c.appendAtStream(offset, data)
	if err == nil && c.inplace {
		c.mu.Lock()
		c.proj = max
		c.mu.Unlock()
	}
	return max, err
}

func (c *Client) appendAtStream(offset int64, data []byte) (int64, error) {
	raw := &storev1.RawAppend{Offset: offset, Data: append([]byte(nil), data...)}
	op := &pendingOp{op: &storev1.AppendOp{Op: &storev1.AppendOp_Raw{Raw: raw}}, size: len(data) + 16, done: make(chan opDone, 1)}
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
// segment end, from the mapped segment files or the read-ahead cache.
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
	base := segmentBase(offset, b)
	end := min(b.Max, offset+int64(max))
	if b.SegmentSize > 0 {
		end = min(end, base+b.SegmentSize)
	}
	return c.rd.read(offset, end, base, b.SegmentSize)
}

// segmentBase is the start of the segment holding off: segments are
// SegmentSize long and one of them starts at LastSegmentStart.
func segmentBase(off int64, b store.Bounds) int64 {
	if b.SegmentSize <= 0 {
		return 0
	}
	d := (off - b.LastSegmentStart) % b.SegmentSize
	if d < 0 {
		d += b.SegmentSize
	}
	return off - d
}

// ReadMessages decodes records with one unary call (a control-plane read).
func (c *Client) ReadMessages(offset int64, n int) ([]record.Record, int64, error) {
	if err := c.check(); err != nil {
		return nil, 0, err
	}
	c.app.drain() // in-place appends must reach the plugin first
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

// Bounds returns the latest bounds the plugin reported. It never blocks on
// the plugin: the max offset is exact (every append and truncate goes
// through this client), the flushed offset trails by at most a few tens of
// milliseconds.
func (c *Client) Bounds() store.Bounds {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.bounds
	b.Max = max(b.Max, c.proj)
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
	if err := c.asyncFailure(); err != nil {
		return err
	}
	ctx, cancel := c.callCtx()
	defer cancel()
	b, err := c.rpc.Truncate(ctx, &storev1.TruncateRequest{Offset: offset})
	c.rd.invalidate()
	c.closeWriteFiles()
	if err != nil {
		return fmt.Errorf("storeplugin: truncate to %d: %w", offset, c.fail(err))
	}
	c.mu.Lock()
	c.proj = 0
	clear(c.queues)
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
	if err := c.asyncFailure(); err != nil {
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

// Close drains the append stream, closes the plugin's store and releases
// the mappings (those still pinned by views go when the views are released).
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
	c.wmu.Lock()
	c.closeWriteFiles()
	c.wmu.Unlock()
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
	c.rd.close()
	return err
}

// appendInPlace is AppendAt's fast path (see AppendAt); done=false means
// "use the stream".
func (c *Client) appendInPlace(offset int64, data []byte) (newMax int64, done bool, err error) {
	if err := c.asyncFailure(); err != nil {
		return 0, true, err
	}
	c.mu.Lock()
	acked := c.bounds
	proj := max(c.proj, acked.Max)
	c.mu.Unlock()
	seg := acked.SegmentSize
	if len(data) == 0 || seg <= 0 {
		return 0, false, nil
	}
	if offset != proj {
		return 0, false, nil // the plugin answers ErrOffsetMismatch, or starts an empty log there
	}
	base := segmentBase(offset, acked)
	// Only inside a segment the plugin created, and not across its end
	// (the plugin reports that error).
	if base > acked.LastSegmentStart || acked.Max <= base || offset-base+int64(len(data)) > seg {
		return 0, false, nil
	}
	f, err := c.writeFile(base)
	if err != nil {
		c.log.Debug("in-place append unavailable; using the stream", "segment", base, "error", err)
		return 0, false, nil
	}
	if _, err := f.WriteAt(data, offset-base); err != nil {
		return 0, true, fmt.Errorf("storeplugin: in-place append at %d: %w", offset, err)
	}
	op := &pendingOp{
		op:    &storev1.AppendOp{Op: &storev1.AppendOp_InPlace{InPlace: &storev1.InPlace{Offset: offset, Length: int64(len(data))}}},
		size:  32,
		async: c.inPlaceDone,
	}
	if err := c.app.enqueue(op); err != nil {
		return 0, true, err
	}
	newMax = offset + int64(len(data))
	c.mu.Lock()
	c.proj = newMax
	c.mu.Unlock()
	c.watch.Notify()
	return newMax, true, nil
}

// inPlaceDone records the plugin's answer to an in-place append.
func (c *Client) inPlaceDone(d opDone) {
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
		c.asyncErr = fmt.Errorf("storeplugin: in-place append: %w", err)
	}
	c.mu.Unlock()
	if first {
		c.log.Error("the plugin refused an in-place append; the store is unusable", "error", err)
	}
}

func (c *Client) asyncFailure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.asyncErr
}

// writeFile opens (once) the segment file at base for writing. Called with
// wmu held.
func (c *Client) writeFile(base int64) (*os.File, error) {
	if f := c.wfiles[base]; f != nil {
		return f, nil
	}
	ctx, cancel := c.callCtx()
	resp, err := c.rpc.SegmentFile(ctx, &storev1.SegmentFileRequest{Base: base})
	cancel()
	if err != nil {
		return nil, c.fail(err)
	}
	f, err := os.OpenFile(resp.Path, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	c.wfiles[base] = f
	return f, nil
}

// closeWriteFiles closes the segment files open for writing. Called with
// wmu held.
func (c *Client) closeWriteFiles() {
	for b, f := range c.wfiles {
		f.Close()
		delete(c.wfiles, b)
	}
}
