package storeplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/replicatorhq/replicator/sdk/internal/side"
	"github.com/replicatorhq/replicator/sdk/proto/storev1"
	"github.com/replicatorhq/replicator/sdk/store"
)

// streamReader serves the reads the tail cannot: it keeps one chunk stream
// open as a cursor at the offset after the last chunk it received, so a
// reader going forward (a master shipping a log to a slave that catches
// up) takes chunk after chunk from a stream that runs ahead by the
// socket's buffers (a ReadChannel side channel) or gRPC's flow control
// window (ReadStream, when the plugin has no ReadChannel or side channels
// are disabled), with no round trip per read. A read elsewhere reopens
// the stream there. The last chunks stay in a small cache; views point
// into chunks. A side channel's chunks come from a pool and go back to it
// once the cache has dropped them and every view of them is released (a
// master releases each view once its frame is written: no fresh buffer to
// clear and fault in per chunk); a view never released keeps its chunk
// out of the pool, so views still need no release.
type streamReader struct {
	c      *Client
	mu     sync.Mutex // serializes reads; held while a chunk is awaited
	chunks []cachedChunk
	cur    *cursor // nil: none open
	pool   chunkPool
}

type cachedChunk struct {
	off  int64
	data []byte
	buf  *chunkBuf // nil: not from the pool (a gRPC chunk)
}

// chunkPool keeps a few released chunk buffers for the next chunks.
type chunkPool struct {
	mu   sync.Mutex
	free [][]byte
}

// chunkPoolMax bounds the buffers a pool keeps (with 256 KiB chunks: 2 MiB).
const chunkPoolMax = 8

// get returns a buffer of n bytes, from the pool when one is large enough.
func (p *chunkPool) get(n int) []byte {
	p.mu.Lock()
	for len(p.free) > 0 {
		b := p.free[len(p.free)-1]
		p.free[len(p.free)-1] = nil
		p.free = p.free[:len(p.free)-1]
		if cap(b) >= n {
			p.mu.Unlock()
			return b[:n]
		}
	}
	p.mu.Unlock()
	return make([]byte, n)
}

func (p *chunkPool) put(b []byte) {
	p.mu.Lock()
	if len(p.free) < chunkPoolMax {
		p.free = append(p.free, b[:cap(b)])
	}
	p.mu.Unlock()
}

// chunkBuf is a pooled chunk's buffer: the cache holds one reference and
// each view one more; the last one released puts it back in the pool.
type chunkBuf struct {
	buf  []byte
	refs atomic.Int32
	pool *chunkPool
}

func (c *chunkBuf) unref() {
	if c.refs.Add(-1) == 0 {
		c.pool.put(c.buf)
	}
}

// viewRef is one view's reference to a pooled chunk. Releasing it twice
// (through copies of the view) counts once.
type viewRef struct {
	c    *chunkBuf
	done atomic.Bool
}

func (r *viewRef) Release() {
	if r.done.CompareAndSwap(false, true) {
		r.c.unref()
	}
}

// view returns bytes [off, hi) of ch as a view holding a reference.
func (ch cachedChunk) view(off, hi int64) store.View {
	v := store.View{Offset: off, Data: ch.data[off-ch.off : hi-ch.off : hi-ch.off]}
	if ch.buf != nil {
		ch.buf.refs.Add(1)
		v.Ref = &viewRef{c: ch.buf}
	}
	return v
}

// dropChunks forgets cached chunks (the cache's reference).
func dropChunks(chunks []cachedChunk) {
	for i := range chunks {
		if chunks[i].buf != nil {
			chunks[i].buf.unref()
		}
		chunks[i] = cachedChunk{}
	}
}

// cursor is an open chunk stream and the offset its next chunk starts at.
type cursor struct {
	rs   chunkSource
	next int64
}

// chunkSource is one chunk stream: a ReadChannel side channel or a gRPC
// ReadStream. Recv returns io.EOF at the end of the stream.
type chunkSource interface {
	// Recv returns the next chunk and, when its bytes are a pooled
	// buffer, that buffer with one reference (the caller's).
	Recv() (*storev1.Chunk, *chunkBuf, error)
	Close()
}

type grpcChunks struct {
	rs     storev1.Store_ReadStreamClient
	cancel context.CancelFunc
}

func (g *grpcChunks) Recv() (*storev1.Chunk, *chunkBuf, error) {
	c, err := g.rs.Recv()
	return c, nil, err
}
func (g *grpcChunks) Close() { g.cancel() }

// sideChunks reads a ReadChannel ahead of the reader: a goroutine takes up
// to sideReadAhead chunks off the socket, so the plugin keeps writing while
// the reader ships what it has (the two processes then run in long
// stretches instead of one hand-off per socket buffer).
type sideChunks struct {
	f    *side.FrameConn
	pool *chunkPool
	ch   chan chunkOrErr
	stop chan struct{}
	done chan struct{}
}

type chunkOrErr struct {
	c   *storev1.Chunk
	buf []byte // from pool
	err error
}

// sideReadAhead is how many chunks a ReadChannel reader holds ahead.
const sideReadAhead = 16

func newSideChunks(f *side.FrameConn, pool *chunkPool) *sideChunks {
	s := &sideChunks{f: f, pool: pool, ch: make(chan chunkOrErr, sideReadAhead), stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *sideChunks) run() {
	defer close(s.done)
	for {
		c := &storev1.Chunk{}
		var buf []byte
		parts, err := s.f.ReadInto(c, func(n int) []byte {
			buf = s.pool.get(n)
			return buf
		})
		if err == nil {
			if len(parts) != 1 {
				err = fmt.Errorf("chunk at %d: %d parts: %w", c.Offset, len(parts), side.ErrBadFrame)
			} else {
				c.Data = parts[0]
			}
		}
		select {
		case s.ch <- chunkOrErr{c, buf, err}:
		case <-s.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// Recv returns the next chunk; after an error the cursor is closed.
func (s *sideChunks) Recv() (*storev1.Chunk, *chunkBuf, error) {
	r := <-s.ch
	if r.err != nil {
		if errors.Is(r.err, io.EOF) {
			return nil, nil, io.EOF
		}
		return nil, nil, fmt.Errorf("%w: %w", ErrPluginShutdown, r.err)
	}
	var cb *chunkBuf
	if r.buf != nil {
		cb = &chunkBuf{buf: r.buf, pool: s.pool}
		cb.refs.Store(1)
	}
	return r.c, cb, nil
}

// Close ends the stream and waits for the reading goroutine.
func (s *sideChunks) Close() {
	close(s.stop)
	s.f.Close()
	<-s.done
}

// streamCacheChunks bounds the cache (with 256 KiB chunks: 8 MiB).
const streamCacheChunks = 32

// readStreamUnbounded asks a ReadStream to run until the max offset.
const readStreamUnbounded = 1 << 62

func newStreamReader(c *Client) *streamReader { return &streamReader{c: c} }

func (r *streamReader) lookup(off, end int64) (store.View, bool) {
	for i := len(r.chunks) - 1; i >= 0; i-- {
		ch := r.chunks[i]
		if off >= ch.off && off < ch.off+int64(len(ch.data)) {
			return ch.view(off, min(end, ch.off+int64(len(ch.data)))), true
		}
	}
	return store.View{}, false
}

// read returns bytes [off, end) or fewer, from the cache or the next chunk
// of the cursor at off (opened there if needed). end is already clamped to
// the max offset and the segment end.
func (r *streamReader) read(off, end int64) (store.View, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v, ok := r.lookup(off, end); ok {
		return v, nil
	}
	// A stream that ended (it reached the plugin's max offset when it
	// started) is reopened once: the log may have grown since.
	for attempt := 0; attempt < 2; attempt++ {
		if r.cur == nil || r.cur.next != off {
			if err := r.open(off); err != nil {
				return store.View{}, err
			}
		}
		ch, buf, err := r.cur.rs.Recv()
		if errors.Is(err, io.EOF) {
			r.closeCursor()
			continue
		}
		if err != nil {
			r.closeCursor()
			return store.View{}, fmt.Errorf("storeplugin: read stream at %d: %w", off, r.c.fail(err))
		}
		if ch.Offset != off || len(ch.Data) == 0 {
			if buf != nil {
				buf.unref()
			}
			r.closeCursor()
			return store.View{}, fmt.Errorf("storeplugin: read stream at %d sent a chunk at %d of %d bytes: %w", off, ch.Offset, len(ch.Data), store.ErrCorrupt)
		}
		r.cur.next = off + int64(len(ch.Data))
		cc := cachedChunk{off: off, data: ch.Data, buf: buf}
		r.chunks = append(r.chunks, cc)
		if n := len(r.chunks) - streamCacheChunks; n > 0 {
			dropChunks(r.chunks[:n])
			r.chunks = append([]cachedChunk(nil), r.chunks[n:]...)
		}
		return cc.view(off, min(end, r.cur.next)), nil
	}
	return store.View{}, fmt.Errorf("storeplugin: read stream at %d returned no data below the max offset %d: %w", off, end, store.ErrOffsetOutOfRange)
}

// open starts a cursor at off: on a ReadChannel side channel when the
// plugin offers it, else on a gRPC ReadStream. Called with mu held.
func (r *streamReader) open(off int64) error {
	r.closeCursor()
	c := r.c
	if !c.cfg.DisableSideChannel && !c.noReadSide.Load() {
		f, err := c.dialSide(func(ctx context.Context, sl *side.Listener) error {
			resp, err := c.rpc.ReadChannel(ctx, &storev1.ReadChannelRequest{Socket: sl.Path, Token: sl.Token, From: off, ChunkBytes: int32(c.cfg.ChunkBytes), FrameVersion: side.FrameVersion})
			if err != nil {
				return err
			}
			return checkFrameVersion(resp.FrameVersion, side.FrameVersion)
		})
		if err == nil {
			r.cur = &cursor{rs: newSideChunks(f, &r.pool), next: off}
			return nil
		}
		if errors.Is(c.fail(errors.Unwrap(err)), ErrPluginShutdown) {
			return err
		}
		if !olderSDK(err) {
			c.log.Warn("read side channel unavailable; reads use the gRPC stream", "error", err)
		}
		c.noReadSide.Store(true)
	}
	ctx, cancel := context.WithCancel(c.ctx)
	rs, err := c.rpc.ReadStream(ctx, &storev1.ReadStreamRequest{From: off, MaxBytes: readStreamUnbounded, ChunkBytes: int32(c.cfg.ChunkBytes)})
	if err != nil {
		cancel()
		return fmt.Errorf("storeplugin: read stream at %d: %w", off, c.fail(err))
	}
	r.cur = &cursor{rs: &grpcChunks{rs: rs, cancel: cancel}, next: off}
	return nil
}

// closeCursor ends the open stream, if any. Called with mu held.
func (r *streamReader) closeCursor() {
	if r.cur != nil {
		r.cur.rs.Close()
		r.cur = nil
	}
}

// invalidate forgets everything (the log was truncated, or Close).
func (r *streamReader) invalidate() {
	r.mu.Lock()
	r.closeCursor()
	dropChunks(r.chunks)
	r.chunks = nil
	r.mu.Unlock()
}

func (r *streamReader) trim(min int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	keep := r.chunks[:0]
	for _, ch := range r.chunks {
		if ch.off+int64(len(ch.data)) > min {
			keep = append(keep, ch)
		} else if ch.buf != nil {
			ch.buf.unref()
		}
	}
	clear(r.chunks[len(keep):])
	r.chunks = keep
}

// tail holds the newest bytes of the log as the host saw them go in: the
// data of its AppendAt calls and the records its Appends brought back in
// their acks (want_records). A master ships what it has just appended, so
// its reads at the end of the log are answered here without a round trip.
// Blocks only grow at their end: the bytes behind a view never change, and
// views need no release (a dropped block lives while a view holds it).
type tail struct {
	mu     sync.Mutex
	limit  int // bytes kept at most, counted in whole blocks
	held   int
	blocks []tailBlock // ascending offsets, each contiguous in itself
}

type tailBlock struct {
	off  int64
	data []byte // filled part; cap is the block's room
}

// Sizes of the tail's blocks: small writes (records) are copied into
// blocks of tailBlockBytes; a write of at least tailOwnBytes (a slave's
// frame, already the host's own copy) becomes a block of its own.
const (
	tailBlockBytes = 256 << 10
	tailOwnBytes   = 16 << 10
)

func newTail(limit int) *tail { return &tail{limit: limit} }

// adopt records the bytes of a batch's successful appends, in order:
// records[i] is what the ack brought back for op i (copied: it may point
// into the side channel's read buffer).
func (t *tail) adopt(ops []*pendingOp, results []*storev1.OpResult, records [][]byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, op := range ops {
		res, rec := results[i], records[i]
		switch o := op.op.Op.(type) {
		case *storev1.AppendOp_Raw:
			if !op.queued && res.Error == nil && len(op.data) > 0 {
				t.put(o.Raw.Offset, op.data, true)
			}
		case *storev1.AppendOp_Message:
			if res.Result != nil && len(rec) == int(res.Result.Size) && len(rec) > 0 {
				t.put(res.Result.Offset, rec, false)
			}
		}
	}
}

// copyIn copies data at off into the tail (a queued AppendAt, before its
// ack) and returns the copy, whose capacity runs on to its block's end (a
// following copyIn may continue it: enqueueRaw grows an op over both).
func (t *tail) copyIn(off int64, data []byte) []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.put(off, data, false)
}

// put appends data at off: to the last block when it continues it and has
// room, else in a new block, and returns where it landed (with the
// capacity left in its block). own: data is the host's and never changes,
// so a large one is kept without a copy. Called with mu held.
func (t *tail) put(off int64, data []byte, own bool) []byte {
	if n := len(t.blocks); n > 0 {
		last := &t.blocks[n-1]
		if l := len(last.data); last.off+int64(l) == off && cap(last.data)-l >= len(data) {
			last.data = append(last.data, data...)
			return last.data[l:]
		}
	}
	var b []byte
	if own && len(data) >= tailOwnBytes {
		b = data[:len(data):len(data)]
	} else {
		b = append(make([]byte, 0, max(tailBlockBytes, len(data))), data...)
	}
	t.link(off, b)
	return b
}

// reserve returns room for n bytes at off for AppendAtFrom to fill: the
// spare capacity of the last block when off continues it, else a new
// block's start. Nothing is visible to read until commit. The caller holds
// the client's wmu (one writer), so nothing else writes there meanwhile;
// readers only see a block's filled part.
func (t *tail) reserve(off int64, n int) []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if k := len(t.blocks); k > 0 {
		last := t.blocks[k-1]
		if l := len(last.data); last.off+int64(l) == off && cap(last.data)-l >= n {
			return last.data[l : l+n : cap(last.data)]
		}
	}
	return make([]byte, n, max(tailBlockBytes, n))
}

// commit makes room from reserve, now filled, part of the tail and returns
// it as copyIn does (capacity up to its block's end).
func (t *tail) commit(off int64, room []byte) []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if k := len(t.blocks); k > 0 && len(room) > 0 {
		last := &t.blocks[k-1]
		if l := len(last.data); last.off+int64(l) == off && cap(last.data)-l >= len(room) && &last.data[:l+1][l] == &room[0] {
			last.data = last.data[:l+len(room)]
			return last.data[l:]
		}
	}
	t.link(off, room)
	return room
}

// link adds b at off as the newest block and drops the oldest ones beyond
// the limit. Called with mu held.
func (t *tail) link(off int64, b []byte) {
	t.blocks = append(t.blocks, tailBlock{off: off, data: b})
	t.held += cap(b)
	for len(t.blocks) > 1 && t.held > t.limit {
		t.held -= cap(t.blocks[0].data)
		t.blocks[0] = tailBlock{}
		t.blocks = t.blocks[1:]
	}
}

// read returns bytes [off, end) or fewer, from the block that holds off.
func (t *tail) read(off, end int64) (store.View, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := sort.Search(len(t.blocks), func(i int) bool {
		b := t.blocks[i]
		return b.off+int64(len(b.data)) > off
	})
	if i == len(t.blocks) || t.blocks[i].off > off {
		return store.View{}, false
	}
	b := t.blocks[i]
	hi := min(end, b.off+int64(len(b.data)))
	return store.View{Offset: off, Data: b.data[off-b.off : hi-b.off : hi-b.off]}, true
}

// invalidate forgets everything (the log was truncated).
func (t *tail) invalidate() {
	t.mu.Lock()
	t.blocks, t.held = nil, 0
	t.mu.Unlock()
}

// trim drops the blocks wholly below min (retention removed them).
func (t *tail) trim(min int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.blocks) > 0 && t.blocks[0].off+int64(len(t.blocks[0].data)) <= min {
		t.held -= cap(t.blocks[0].data)
		t.blocks[0] = tailBlock{}
		t.blocks = t.blocks[1:]
	}
}
