package commitlog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/replicatorhq/replicator/plugins/commitlog/vfs"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

var (
	_ store.Store        = (*Log)(nil)
	_ store.AppenderFrom = (*Log)(nil)
)

// Log is a RocketMQ-layout commit log on mmap'd segment files. It
// implements store.Store; all methods are safe for concurrent use.
type Log struct {
	fs       vfs.FS
	root     string // DATA
	dir      string // DATA/commitlog
	allocDir string // DATA/commitlog.alloc, or dir when segments are created in place
	ckptPath string
	opts     Options
	log      hclog.Logger
	m        *metrics
	now      func() time.Time
	maxRec   int
	// keepAbort: DATA/abort is a RocketMQ broker's, kept at Close.
	keepAbort bool

	// Lock order: ckptMu before mu. gcMu and watch's lock are leaves.
	ckptMu   sync.Mutex // serialises checkpoint writes with Truncate
	lastCkpt checkpoint // guarded by ckptMu

	mu         sync.Mutex // the put lock: every change of the log
	closed     bool
	queues     queueTable // topic → queue → next queue offset
	dispatched int64      // end of the last whole record (<= max)
	lastTS     int64      // store timestamp of the last dispatched record
	stalled    bool       // dispatch hit bytes that are not records
	spare      *segment   // preallocated next segment, still in allocDir
	filling    bool       // an AppendAtFrom is reading into the log
	fillDone   sync.Cond  // signalled when filling ends; L is &mu
	fillBuf    []byte     // AppendAtFrom's read buffer, used while filling
	vwalk      viewWalk   // AppendAtFrom's inline walk of views, used while filling
	// The inline dispatch's pending bytes (dispatch.go): fillBuf[:pendLen]
	// holds the log's bytes from pendOff (the dispatched offset) to the
	// max offset, valid while truncGen is pendGen and both offsets match.
	pendOff int64
	pendLen int
	pendGen uint64

	segs      atomic.Pointer[[]*segment] // replaced (copy on write) under mu
	max       atomic.Int64
	flushed   atomic.Int64
	truncGen  atomic.Uint64 // bumped by every truncation, under mu
	isClosed  atomic.Bool
	dirDirty  atomic.Bool // a segment file was created since the last dir fsync
	flushErr  atomic.Pointer[error]
	watch     store.Notifier // Watch and its wake-ups (its lock is a leaf)
	gcMu      sync.Mutex
	gcDone    chan struct{} // closed when the current group commit ends
	kick      chan struct{}
	allocReq  chan int64
	warmReq   chan *segment
	warmKick  chan struct{}
	warmAhead int64 // Options.PrefaultAhead, or prefaultAhead
	// replicating is set by replicated appends and cleared by Append: a
	// replica's pages are filled by pwrite, not populated ahead.
	replicating atomic.Bool
	// dispatchKick wakes the dispatcher (dispatch.go).
	dispatchKick chan struct{}
	done         chan struct{}
	wg           sync.WaitGroup
}

// Open opens or creates the commit log under dir (segments live in
// dir/commitlog, the checkpoint in dir/commitlog.checkpoint), recovers it
// and starts its background flusher, allocator and housekeeper.
// A log that fails recovery with corruption gives an error for which
// IsCorrupt is true, naming the file and offset.
func Open(dir string, opts Options) (*Log, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	lg := opts.Logger
	if lg == nil {
		lg = hclog.NewNullLogger()
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	l := &Log{
		fs:           opts.FS,
		root:         dir,
		dir:          filepath.Join(dir, "commitlog"),
		ckptPath:     filepath.Join(dir, checkpointName),
		opts:         opts,
		log:          lg.Named("commitlog"),
		now:          now,
		maxRec:       opts.maxRecord(),
		queues:       queueTable{},
		gcDone:       make(chan struct{}),
		kick:         make(chan struct{}, 1),
		allocReq:     make(chan int64, 1),
		warmReq:      make(chan *segment, 1),
		warmKick:     make(chan struct{}, 1),
		dispatchKick: make(chan struct{}, 1),
		done:         make(chan struct{}),
		warmAhead:    cmp.Or(opts.PrefaultAhead, prefaultAhead),
	}
	if l.fs == nil {
		l.fs = vfs.Default
	}
	l.fillDone.L = &l.mu
	l.segs.Store(&[]*segment{})
	if err := l.fs.MkdirAll(l.dir, 0o755); err != nil {
		return nil, fmt.Errorf("commitlog: open: %w", err)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("commitlog: register metrics: %w", err)
	}
	l.m = m
	if err := l.setupAllocDir(); err != nil {
		m.unregister()
		return nil, err
	}
	err = l.recover()
	if err == nil {
		err = l.markOpen()
	}
	if err != nil {
		for _, s := range l.segList() {
			s.Release()
		}
		l.removeAllocDir()
		m.unregister()
		return nil, err
	}
	l.go_("commitlog-flusher", l.flusher)
	l.go_("commitlog-housekeeper", l.housekeeper)
	l.go_("commitlog-dispatcher", l.dispatcher)
	if opts.Preallocate {
		l.go_("commitlog-allocator", l.allocator)
		if segs := l.segList(); len(segs) > 0 {
			l.requestSpare(segs[len(segs)-1].end())
		}
	}
	return l, nil
}

func (l *Log) go_(name string, f func()) {
	l.wg.Add(1)
	go pprof.Do(context.Background(), pprof.Labels("goroutine", name), func(context.Context) {
		defer l.wg.Done()
		f()
	})
}

func (l *Log) segList() []*segment { return *l.segs.Load() }

// segmentFor returns the segment holding offset off (start <= off < end).
func segmentFor(segs []*segment, off int64) (*segment, int) {
	if len(segs) == 0 || off < segs[0].start {
		return nil, -1
	}
	i := int((off - segs[0].start) / segs[0].size)
	if i >= len(segs) {
		return nil, -1
	}
	return segs[i], i
}

func mapRecordErr(op string, err error) error {
	switch {
	case errors.Is(err, record.ErrInvalidTopic):
		return fmt.Errorf("commitlog: %s: %w: %w", op, store.ErrInvalidTopic, err)
	case errors.Is(err, record.ErrTooLarge):
		return fmt.Errorf("commitlog: %s: %w: %w", op, store.ErrMessageTooLarge, err)
	}
	return fmt.Errorf("commitlog: %s: %w", op, err)
}

// Append encodes msg at the end of the log (see store.Store). Invalid
// input is refused before anything is written: store.ErrInvalidTopic,
// store.ErrMessageTooLarge, or record.ErrInvalidProperty.
func (l *Log) Append(ctx context.Context, msg *record.Message) (store.AppendResult, error) {
	if err := ctx.Err(); err != nil {
		return store.AppendResult{}, fmt.Errorf("commitlog: append: %w", err)
	}
	size, err := record.Size(msg)
	if err != nil {
		return store.AppendResult{}, mapRecordErr("append", err)
	}
	if size > l.maxRec {
		return store.AppendResult{}, fmt.Errorf("commitlog: append: %w: record of %d bytes, limit %d", store.ErrMessageTooLarge, size, l.maxRec)
	}
	now := l.now()
	ts := now.UnixMilli()

	l.mu.Lock()
	l.waitFill()
	if l.closed {
		l.mu.Unlock()
		return store.AppendResult{}, fmt.Errorf("commitlog: append: %w", store.ErrClosed)
	}
	l.dispatch() // a promoted replica: drain the dispatcher's work
	if d, mx := l.dispatched, l.max.Load(); d != mx {
		l.mu.Unlock()
		return store.AppendResult{}, fmt.Errorf("commitlog: append: %w: the log ends inside a partial record at %d (max %d); truncate to %d first", store.ErrOffsetMismatch, d, mx, d)
	}
	seg, err := l.roomFor(int64(size))
	if err != nil {
		l.mu.Unlock()
		return store.AppendResult{}, err
	}
	off := l.max.Load()
	pos := off - seg.start
	qs := l.queues[msg.Topic]
	qo := qs[msg.QueueID]
	if _, err := record.Encode(seg.data[pos:pos:seg.size], msg, qo, off, ts); err != nil {
		l.mu.Unlock()
		return store.AppendResult{}, mapRecordErr("append", err)
	}
	if qs == nil {
		qs = make(map[int32]int64, 4)
		l.queues[msg.Topic] = qs
	}
	qs[msg.QueueID] = qo + 1
	next := off + int64(size)
	l.dispatched, l.lastTS = next, ts
	seg.mtime.Store(now.UnixNano())
	l.max.Store(next)
	l.mu.Unlock()

	if l.replicating.Load() {
		l.replicating.Store(false) // promoted: populate ahead again
	}
	l.kickWarm(off, next)

	l.watch.Notify()
	l.m.appendedBytes.Add(float64(size))
	l.m.appended.Inc()
	l.m.maxOffset.Set(float64(next))
	res := store.AppendResult{Offset: off, NextOffset: next, QueueOffset: qo, StoreTimestamp: ts, Size: int32(size)}
	if l.opts.FlushMode == FlushSync {
		if err := l.waitFlush(ctx, next); err != nil {
			return res, err
		}
	}
	return res, nil
}

// roomFor returns the segment where a record of size bytes goes at the
// max offset, writing the end-of-file filler and moving to the next
// segment when size+8 does not fit (mu held).
func (l *Log) roomFor(size int64) (*segment, error) {
	segs := l.segList()
	mx := l.max.Load()
	if len(segs) == 0 {
		return l.roll(mx - mx%l.opts.SegmentSize)
	}
	seg := segs[len(segs)-1]
	pos := mx - seg.start
	rest := seg.size - pos
	if size+record.FillerSize <= rest {
		return seg, nil
	}
	if rest >= record.FillerSize {
		record.PutFiller(seg.data[pos:], int32(rest))
		l.m.appendedBytes.Add(float64(rest))
	}
	l.max.Store(seg.end())
	l.dispatched = seg.end()
	return l.roll(seg.end())
}

// roll makes a segment starting at start the active one (mu held).
func (l *Log) roll(start int64) (*segment, error) {
	seg := l.takeSpare(start)
	if seg == nil {
		var err error
		if seg, err = l.newSegment(start, false); err != nil {
			return nil, err
		}
		if err := l.install(seg); err != nil {
			l.dropSpare(seg)
			return nil, err
		}
		l.requestWarm(seg) // populate ahead of the appends, in the background
	}
	old := l.segList()
	segs := make([]*segment, len(old), len(old)+1)
	copy(segs, old)
	segs = append(segs, seg)
	l.segs.Store(&segs)
	if mx := l.max.Load(); mx < start {
		l.max.Store(start)
	}
	l.m.segments.Set(float64(len(segs)))
	l.requestSpare(seg.end())
	return seg, nil
}

// takeSpare renames the preallocated segment into DATA/commitlog when it
// is the one wanted (mu held).
func (l *Log) takeSpare(start int64) *segment {
	sp := l.spare
	if sp == nil {
		return nil
	}
	l.spare = nil
	if sp.start != start {
		l.dropSpare(sp)
		return nil
	}
	if err := l.install(sp); err != nil {
		l.log.Warn("installing preallocated segment", "error", err)
		l.dropSpare(sp)
		return nil
	}
	sp.mtime.Store(l.now().UnixNano())
	return sp
}

func (l *Log) requestWarm(seg *segment) {
	if !l.opts.Preallocate || !l.opts.Prefault {
		return
	}
	select {
	case l.warmReq <- seg:
	default:
	}
}

func (l *Log) requestSpare(start int64) {
	if !l.opts.Preallocate || l.inPlace() {
		return
	}
	select {
	case l.allocReq <- start:
	default:
	}
}

// AppendAt writes raw replicated bytes at offset (see store.Store). On an
// empty log (min == max) offset must be a segment boundary, where the
// segment is created: that is where a RocketMQ master starts an empty
// slave. The bytes are copied into the segment file with pwrite, not
// through the mapping (see replicaWrite).
func (l *Log) AppendAt(offset int64, data []byte) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seg, mx, err := l.prepareAt(offset, len(data))
	if err != nil || len(data) == 0 {
		return mx, err
	}
	if err := l.replicaWrite(seg, mx-seg.start, data); err != nil {
		return mx, fmt.Errorf("commitlog: append at %d: %w", offset, err)
	}
	return l.publishAt(seg, mx, len(data)), nil
}

// fillChunk bounds the buffer AppendAtFrom reads through: a frame body
// (32 KiB by default) is one read and one pwrite.
const fillChunk = 1 << 20

// AppendAtFrom is AppendAt with the n bytes read from r (as io.ReadFull)
// through a buffer the log keeps, fillChunk at a time, and written to the
// segment file. If r is also a store.Viewer (a slave's frame reader on its
// read-ahead ring), the bytes are written from its views instead, without the copy into the log's buffer. The
// log's lock is not held while r is read, so readers, Bounds, flushes and
// checkpoints go on meanwhile; nothing becomes visible before all n bytes
// are in. Writers (Append, AppendAt, AppendAtFrom, Truncate) wait until it
// returns. If r or a write fails, the bytes written are zeroed again, the
// log is unchanged and the error wraps the cause. A crash meanwhile leaves
// at most a partial tail past the max offset, as a crash inside AppendAt
// does, which recovery handles.
func (l *Log) AppendAtFrom(offset int64, n int, r io.Reader) (int64, error) {
	if n < 0 {
		return 0, fmt.Errorf("commitlog: append at %d: negative length %d", offset, n)
	}
	vr, views := r.(store.Viewer)
	l.mu.Lock()
	seg, mx, err := l.prepareAt(offset, n)
	if err != nil || n == 0 {
		l.mu.Unlock()
		return mx, err
	}
	seg.pin() // the log holds a reference: cannot fail under mu
	l.filling = true
	pend, inline := l.inlineStart(seg, mx, n, views)
	gen := l.truncGen.Load()
	if !views && len(l.fillBuf) < min(n, fillChunk) {
		l.fillBuf = make([]byte, min(max(n, 64<<10), fillChunk))
	}
	l.mu.Unlock()

	pos := mx - seg.start
	var done int
	if views {
		w := &l.vwalk
		w.start(inline, mx-int64(pend), pend)
		done, err = l.fillViews(seg, pos, n, vr, w)
	} else {
		done, err = l.fillCopy(seg, pos, n, r, l.fillBuf[pend:]) // only the filling caller uses fillBuf
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	defer seg.Release()
	l.filling = false
	l.fillDone.Broadcast()
	if err != nil {
		clear(seg.data[pos : pos+int64(done)])
		if views {
			l.pendLen = 0 // the walk moved the pending bytes
		}
		return mx, fmt.Errorf("commitlog: append at %d: %w", offset, err)
	}
	if l.closed {
		return 0, fmt.Errorf("commitlog: append at %d: %w", offset, store.ErrClosed)
	}
	switch {
	case !inline || l.dispatched != mx-int64(pend) || l.truncGen.Load() != gen:
		l.pendLen = 0
	case views:
		l.applyViewWalk(&l.vwalk)
	default:
		l.inlineWalk(seg, l.fillBuf[:pend+n], mx-int64(pend))
	}
	return l.publishAt(seg, mx, n), nil
}

// maxEmptyViews bounds the views in a row that return no bytes and no
// error before AppendAtFrom gives up with io.ErrNoProgress.
const maxEmptyViews = 100

// fillCopy reads n bytes from r through buf and writes them at pos of seg;
// it returns how many were written.
func (l *Log) fillCopy(seg *segment, pos int64, n int, r io.Reader, buf []byte) (int, error) {
	done := 0
	for done < n {
		chunk := buf[:min(n-done, len(buf))]
		k, rerr := io.ReadFull(r, chunk)
		if k > 0 {
			if werr := l.replicaWrite(seg, pos+int64(done), chunk[:k]); werr != nil {
				return done, werr
			}
			done += k
		}
		if rerr != nil {
			return done, fmt.Errorf("read %d of %d bytes: %w", done, n, rerr)
		}
	}
	return done, nil
}

// fillViews writes n bytes of r's views at pos of seg, walking their
// records (w) while they are in r's memory; it returns how many were
// written.
func (l *Log) fillViews(seg *segment, pos int64, n int, r store.Viewer, w *viewWalk) (int, error) {
	done, empty := 0, 0
	for done < n {
		v, rerr := r.View(n - done)
		if len(v) > n-done {
			return done, fmt.Errorf("read %d of %d bytes: a view of %d bytes", done, n, len(v))
		}
		if len(v) > 0 {
			empty = 0
			if werr := l.replicaWrite(seg, pos+int64(done), v); werr != nil {
				return done, werr
			}
			if w.on {
				l.walkView(w, v, seg)
			}
			done += len(v)
		}
		switch {
		case errors.Is(rerr, io.EOF):
			return done, fmt.Errorf("read %d of %d bytes: %w", done, n, io.ErrUnexpectedEOF)
		case rerr != nil:
			return done, fmt.Errorf("read %d of %d bytes: %w", done, n, rerr)
		case len(v) == 0:
			if empty++; empty >= maxEmptyViews {
				return done, fmt.Errorf("read %d of %d bytes: %w", done, n, io.ErrNoProgress)
			}
		}
	}
	return done, nil
}

// replicaWrite writes replicated bytes at pos of seg with pwrite. A
// replica receives whole pages in bulk: pwrite fills fresh page-cache
// pages directly, where a copy through the mapping takes a write fault
// (or a populate) per page first, which costs several times the copy
// (docs/benchmarks.md). The mapping sees the bytes at once (one page
// cache) and msync flushes them. With more than one P the write skips the
// runtime's system-call hand-off (vfs.NoHandoffWriterAt): during a
// catch-up the receive loop's writes overlap the read-ahead goroutine's
// socket reads, and through the ordinary entry the runtime's monitor
// thread then took a tenth of the slave's CPU (docs/benchmarks.md). The
// segment is pinned or held by the log, so its file stays open.
func (l *Log) replicaWrite(seg *segment, pos int64, p []byte) error {
	var err error
	if w, ok := seg.f.(vfs.NoHandoffWriterAt); ok && runtime.GOMAXPROCS(0) > 1 {
		_, err = w.WriteAtNoHandoff(p, pos)
	} else {
		_, err = seg.f.WriteAt(p, pos)
	}
	if err != nil {
		clear(seg.data[pos : pos+int64(len(p))]) // what a short write left
		return fmt.Errorf("write %s at %d: %w", seg.path, pos, err)
	}
	return nil
}

// waitFill waits until no AppendAtFrom is reading into the log (mu held).
func (l *Log) waitFill() {
	for l.filling && !l.closed {
		l.fillDone.Wait()
	}
}

// prepareAt checks an AppendAt of n bytes at offset and returns the
// segment that takes them and the max offset where they go, restarting an
// empty log at offset and rolling to a new segment as needed (mu held; it
// may release and retake mu to restart the log).
func (l *Log) prepareAt(offset int64, n int) (*segment, int64, error) {
	l.waitFill()
	if l.closed {
		return nil, 0, fmt.Errorf("commitlog: append at %d: %w", offset, store.ErrClosed)
	}
	mx := l.max.Load()
	segs := l.segList()
	if offset != mx {
		empty := len(segs) == 0 || mx == segs[0].start
		if !empty || offset%l.opts.SegmentSize != 0 || offset < 0 {
			return nil, mx, fmt.Errorf("commitlog: append at %d: %w: max offset is %d", offset, store.ErrOffsetMismatch, mx)
		}
		// Restart the empty log at offset; that needs ckptMu, taken first.
		l.mu.Unlock()
		err := l.reset(offset)
		l.mu.Lock()
		if err != nil {
			return nil, l.max.Load(), err
		}
		l.waitFill()
		if l.closed {
			return nil, 0, fmt.Errorf("commitlog: append at %d: %w", offset, store.ErrClosed)
		}
		if mx = l.max.Load(); offset != mx {
			return nil, mx, fmt.Errorf("commitlog: append at %d: %w: max offset is %d", offset, store.ErrOffsetMismatch, mx)
		}
		segs = l.segList()
	}
	if n == 0 {
		return nil, mx, nil
	}
	if !l.replicating.Load() {
		l.replicating.Store(true)
	}
	var seg *segment
	if len(segs) == 0 || mx == segs[len(segs)-1].end() {
		var err error
		if seg, err = l.roll(mx); err != nil {
			return nil, mx, err
		}
	} else {
		seg = segs[len(segs)-1]
	}
	pos := mx - seg.start
	if pos+int64(n) > seg.size {
		return nil, mx, fmt.Errorf("commitlog: append at %d: %w: %d bytes, %d left in segment %s", offset, store.ErrSegmentOverflow, n, seg.size-pos, seg.path)
	}
	return seg, mx, nil
}

// publishAt makes n bytes written at mx in seg part of the log (mu held).
func (l *Log) publishAt(seg *segment, mx int64, n int) int64 {
	next := mx + int64(n)
	seg.mtime.Store(l.now().UnixNano())
	l.max.Store(next)
	l.kickDispatch()
	l.watch.Notify()
	l.m.appendedBytes.Add(float64(n))
	l.m.maxOffset.Set(float64(next))
	return next
}

// reset empties a log that holds no bytes and restarts it at offset, a
// segment boundary. It is a no-op when the log is no longer empty or
// already at offset (a concurrent caller won).
func (l *Log) reset(offset int64) error {
	l.ckptMu.Lock()
	defer l.ckptMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waitFill()
	segs := l.segList()
	mx := l.max.Load()
	if l.closed || mx == offset || (len(segs) > 0 && mx != segs[0].start) {
		return nil
	}
	// Checkpoint first: a crash after it finds segments that do not hold
	// the checkpoint's offsets and scans them instead.
	l.truncGen.Add(1)
	c := checkpoint{Flushed: offset, Scan: offset, Queues: l.queues.clone()}
	if err := l.writeCheckpoint(&c); err != nil {
		return err
	}
	l.lastCkpt = c
	for _, s := range segs {
		path := s.path
		s.Release()
		if err := l.fs.Remove(path); err != nil {
			return fmt.Errorf("commitlog: reset: %w", err)
		}
	}
	if l.spare != nil {
		l.dropSpare(l.spare)
		l.spare = nil
	}
	l.segs.Store(&[]*segment{})
	l.max.Store(offset)
	l.flushed.Store(offset)
	l.dispatched = offset
	l.stalled = false
	l.m.segments.Set(0)
	if err := syncDir(l.fs, l.dir); err != nil {
		return err
	}
	l.log.Info("empty log restarted", "offset", offset)
	return nil
}

// Watch registers ch for a non-blocking send whenever the max offset
// changes (see store.Store).
func (l *Log) Watch(ch chan<- struct{}) (cancel func()) { return l.watch.Watch(ch) }

// Read returns a zero-copy view of at most max bytes from offset, never
// crossing a segment end (see store.Store). It does not allocate. The view
// pins its segment: Release it promptly, since retention skips pinned
// segments. Bytes at or past a later truncation point read as zeros.
func (l *Log) Read(offset int64, max int) (store.View, error) {
	for {
		if l.isClosed.Load() {
			return store.View{}, fmt.Errorf("commitlog: read: %w", store.ErrClosed)
		}
		mx := l.max.Load()
		segs := l.segList()
		lo := mx
		if len(segs) > 0 {
			lo = segs[0].start
		}
		if offset < lo || offset > mx {
			return store.View{}, &rangeError{offset: offset, min: lo, max: mx}
		}
		if offset == mx || max <= 0 {
			return store.View{Offset: offset}, nil
		}
		seg, i := segmentFor(segs, offset)
		if seg == nil {
			continue // a segment was added or removed meanwhile
		}
		if !seg.pin() {
			continue
		}
		if i < len(segs)-1 && !seg.touched.Load() {
			seg.touched.Store(true)
		}
		pos := offset - seg.start
		n := min(min(mx, seg.end())-offset, int64(max))
		return store.View{Offset: offset, Data: seg.data[pos : pos+n : pos+n], Ref: seg}, nil
	}
}

// rangeError is ErrOffsetOutOfRange with the bounds; a pointer to a small
// struct so the error path of Read allocates once and the hot path never.
type rangeError struct{ offset, min, max int64 }

func (e *rangeError) Error() string {
	return fmt.Sprintf("commitlog: read at %d: %v: log holds [%d, %d]", e.offset, store.ErrOffsetOutOfRange, e.min, e.max)
}
func (e *rangeError) Unwrap() error { return store.ErrOffsetOutOfRange }

// ReadMessages decodes up to n records from offset, a record boundary,
// skipping end-of-file fillers (see store.Store). It stops early at the
// max offset or at a partial record (a replica mid-transfer). A first
// position that is not a record gives store.ErrNotBoundary; a later
// record that does not verify gives a corruption error.
func (l *Log) ReadMessages(offset int64, n int) ([]record.Record, int64, error) {
	var out []record.Record
	for len(out) < n {
		v, err := l.Read(offset, int(l.opts.SegmentSize)) // a view: its size costs nothing
		if err != nil {
			return out, offset, err
		}
		if len(v.Data) == 0 {
			return out, offset, nil
		}
		rec, err := record.Decode(v.Data)
		switch {
		case errors.Is(err, record.ErrFiller):
			seg := v.Ref.(*segment)
			next := seg.end()
			if int64(rec.TotalSize) != next-offset {
				err = fmt.Errorf("filler of %d bytes with %d left", rec.TotalSize, next-offset)
				break
			}
			v.Release()
			if l.max.Load() < next {
				return out, offset, nil
			}
			offset = next
			continue
		case errors.Is(err, record.ErrShort):
			v.Release()
			return out, offset, nil
		case err == nil && rec.PhysicalOffset != offset:
			err = fmt.Errorf("PHYSICALOFFSET %d", rec.PhysicalOffset)
		}
		if err != nil {
			path := v.Ref.(*segment).path
			v.Release()
			if len(out) == 0 {
				return nil, offset, fmt.Errorf("commitlog: read messages at %d: %w: %w", offset, store.ErrNotBoundary, err)
			}
			return out, offset, corruptf(path, offset, err, "record does not verify")
		}
		v.Release()
		out = append(out, rec)
		offset += int64(rec.TotalSize)
	}
	return out, offset, nil
}

// Bounds reports the log's offsets and geometry (see store.Store).
func (l *Log) Bounds() store.Bounds {
	segs := l.segList()
	mx := l.max.Load()
	b := store.Bounds{Min: mx, Max: mx, Flushed: min(l.flushed.Load(), mx), LastSegmentStart: mx - mx%l.opts.SegmentSize, SegmentSize: l.opts.SegmentSize}
	if len(segs) > 0 {
		b.Min = segs[0].start
		b.LastSegmentStart = segs[len(segs)-1].start
	}
	return b
}

// Close flushes everything, writes the checkpoint, stops the background
// goroutines and unmaps the segments (each once its last View is
// released). A second Close returns store.ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return fmt.Errorf("commitlog: close: %w", store.ErrClosed)
	}
	l.closed = true
	l.isClosed.Store(true)
	l.fillDone.Broadcast()
	l.mu.Unlock()
	close(l.done)
	l.wg.Wait()
	l.mu.Lock()
	l.dispatch() // what the dispatcher left, for the final checkpoint
	l.mu.Unlock()

	err := l.checkpointNow(true)
	if err == nil {
		err = l.markClosed() // a failed checkpoint leaves abort: not a clean shutdown
	}
	l.gcMu.Lock()
	close(l.gcDone) // releases sync waiters; stays closed
	l.gcMu.Unlock()

	l.mu.Lock()
	segs := l.segList()
	sp := l.spare
	l.spare = nil
	l.mu.Unlock()
	for _, s := range segs {
		s.Release()
	}
	if sp != nil {
		l.dropSpare(sp)
	}
	l.removeAllocDir()
	l.m.unregister()
	l.log.Debug("closed", "max", l.max.Load(), "flushed", l.flushed.Load())
	return err
}
