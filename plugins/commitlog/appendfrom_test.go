package commitlog

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"math/rand"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/replicatorhq/replicator/plugins/commitlog/vfs"
	"github.com/replicatorhq/replicator/sdk/store"
)

// pieceReader serves data in pieces of 1..max bytes (random), then err
// (io.EOF if nil).
type pieceReader struct {
	data []byte
	r    *rand.Rand
	max  int
	err  error
}

func (p *pieceReader) Read(b []byte) (int, error) {
	if len(p.data) == 0 {
		if p.err != nil {
			return 0, p.err
		}
		return 0, io.EOF
	}
	n := min(len(b), len(p.data), 1+p.r.Intn(p.max))
	copy(b, p.data[:n])
	p.data = p.data[n:]
	return n, nil
}

// viewPieces is a pieceReader that also hands out its pieces as views
// (AppendAtFrom's copy-free path); a view is spoilt (overwritten) at the
// next call, so that a store that kept one past its validity writes or
// walks the wrong bytes.
type viewPieces struct {
	pieceReader
	last []byte
}

func (v *viewPieces) View(max int) ([]byte, error) {
	for i := range v.last {
		v.last[i] = 0xee
	}
	v.last = nil
	if len(v.data) == 0 {
		if v.err != nil {
			return nil, v.err
		}
		return nil, io.EOF
	}
	n := min(max, len(v.data), 1+v.r.Intn(v.max))
	v.last = bytes.Clone(v.data[:n])
	v.data = v.data[n:]
	return v.last, nil
}

// replicateFrom is replicate with AppendAtFrom, each chunk delivered in
// random pieces.
func replicateFrom(t testing.TB, master, replica *Log, upto int64, r *rand.Rand, chunk int) {
	t.Helper()
	replicateVia(t, master, replica, upto, r, chunk, false)
}

// replicateVia is replicateFrom, with views when views is set.
func replicateVia(t testing.TB, master, replica *Log, upto int64, r *rand.Rand, chunk int, views bool) {
	t.Helper()
	for {
		at := replica.Bounds().Max
		if at >= upto {
			return
		}
		v, err := master.Read(at, 1+r.Intn(chunk))
		if err != nil {
			t.Fatalf("master Read(%d): %v", at, err)
		}
		n := min(int64(len(v.Data)), upto-at)
		data := bytes.Clone(v.Data[:n])
		v.Release()
		var src io.Reader = &pieceReader{data: data, r: r, max: 1 + r.Intn(700)}
		if views {
			src = &viewPieces{pieceReader: pieceReader{data: data, r: r, max: 1 + r.Intn(9000)}}
		}
		next, err := replica.AppendAtFrom(at, int(n), src)
		if err != nil || next != at+n {
			t.Fatalf("AppendAtFrom(%d, %d bytes) = %d, %v", at, n, next, err)
		}
	}
}

func TestCommitLogAppendAtFrom(t *testing.T) {
	const seg = 8192
	r := rand.New(rand.NewSource(11))
	master := mustOpen(t, t.TempDir(), testOptions(t, seg))
	defer mustClose(t, master)
	for master.Bounds().Max < 5*seg+700 {
		mustAppend(t, master, testMsg("T", int32(r.Intn(3)), 20+r.Intn(1500), r.Int63()))
	}
	mb := master.Bounds()

	rdir := t.TempDir()
	replica := mustOpen(t, rdir, testOptions(t, seg))
	untouched := &pieceReader{data: []byte{1}, r: r, max: 1}
	if _, err := replica.AppendAtFrom(seg+10, 1, untouched); !errors.Is(err, store.ErrOffsetMismatch) {
		t.Fatalf("unaligned start: %v", err)
	}
	replicateFrom(t, master, replica, 2*seg+999, r, 3000) // stops mid-record
	at := replica.Bounds().Max
	if _, err := replica.AppendAtFrom(at+1, 1, untouched); !errors.Is(err, store.ErrOffsetMismatch) {
		t.Fatalf("gap: %v", err)
	}
	if _, err := replica.AppendAtFrom(at, seg, untouched); !errors.Is(err, store.ErrSegmentOverflow) {
		t.Fatalf("crossing the segment end: %v", err)
	}
	if _, err := replica.AppendAtFrom(at, -1, untouched); err == nil {
		t.Fatal("negative length accepted")
	}
	if got, err := replica.AppendAtFrom(at, 0, untouched); got != at || err != nil {
		t.Fatalf("empty AppendAtFrom = %d, %v", got, err)
	}
	if len(untouched.data) != 1 {
		t.Fatal("a refused AppendAtFrom read its reader")
	}
	// AppendAt and AppendAtFrom interleave.
	replicate(t, master, replica, 3*seg+5, r, 2000)
	replicateFrom(t, master, replica, mb.Max, r, 5000)
	sameBytes(t, master, replica, 0, mb.Max)
	mustClose(t, replica)
	replica = mustOpen(t, rdir, testOptions(t, seg))
	defer mustClose(t, replica)
	if got := replica.Bounds(); got.Max != mb.Max || got.Min != 0 {
		t.Fatalf("reopened replica bounds %+v, master %+v", got, mb)
	}
	sameBytes(t, master, replica, 0, mb.Max)
	// Promoted, it continues the queues.
	want, err := master.Append(context.Background(), testMsg("T", 1, 10, 1))
	if err != nil {
		t.Fatal(err)
	}
	got, err := replica.Append(context.Background(), testMsg("T", 1, 10, 1))
	if err != nil || got.QueueOffset != want.QueueOffset || got.Offset != want.Offset {
		t.Fatalf("promoted replica: %+v, master %+v (%v)", got, want, err)
	}
}

// TestCommitLogAppendAtFromReadError: a reader that fails leaves the log
// as it was, with the bytes it delivered zeroed again.
func TestCommitLogAppendAtFromReadError(t *testing.T) {
	const seg = 8192
	l := mustOpen(t, t.TempDir(), testOptions(t, seg))
	defer mustClose(t, l)
	mustAppend(t, l, testMsg("T", 0, 100, 1))
	b0 := l.Bounds()
	boom := errors.New("boom")
	src := bytes.Repeat([]byte{0xab}, 3000)
	_, err := l.AppendAtFrom(b0.Max, 4000, &pieceReader{data: src, r: rand.New(rand.NewSource(1)), max: 512, err: boom})
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want the reader's", err)
	}
	if b := l.Bounds(); b != b0 {
		t.Fatalf("bounds %+v after a failed AppendAtFrom, want %+v", b, b0)
	}
	seg0 := l.segList()[0]
	if tail := seg0.data[b0.Max : b0.Max+4000]; !bytes.Equal(tail, make([]byte, 4000)) {
		t.Fatal("bytes of the failed AppendAtFrom left in the segment")
	}
	// The log works on: a record, then raw bytes.
	mustAppend(t, l, testMsg("T", 0, 100, 2))
	if n := len(readAll(t, l)); n != 2 {
		t.Fatalf("%d records, want 2", n)
	}
}

// blockingReader delivers first, then blocks until release is closed, then
// delivers rest.
type blockingReader struct {
	first, rest []byte
	started     chan struct{}
	release     chan struct{}
	fail        error
	once        sync.Once
}

func (b *blockingReader) Read(p []byte) (int, error) {
	if len(b.first) > 0 {
		n := copy(p, b.first)
		b.first = b.first[n:]
		return n, nil
	}
	b.once.Do(func() { close(b.started) })
	<-b.release
	if b.fail != nil {
		return 0, b.fail
	}
	n := copy(p, b.rest)
	b.rest = b.rest[n:]
	return n, nil
}

// TestCommitLogAppendAtFromConcurrency: while an AppendAtFrom waits for
// its reader, readers, Bounds and flushes go on and see nothing of it;
// writers (Append, AppendAt, Truncate) wait for it; Close does not.
func TestCommitLogAppendAtFromConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const seg = 8192
		r := rand.New(rand.NewSource(5))
		master := mustOpen(t, t.TempDir(), testOptions(t, seg))
		defer mustClose(t, master)
		for master.Bounds().Max < seg/2 {
			mustAppend(t, master, testMsg("T", 0, 100+r.Intn(300), r.Int63()))
		}
		l := mustOpen(t, t.TempDir(), testOptions(t, seg))
		closed := false
		defer func() {
			if !closed {
				l.Close()
			}
		}()
		replicate(t, master, l, 1000, r, 400)
		b0 := l.Bounds()
		v, err := master.Read(b0.Max, 2000)
		if err != nil {
			t.Fatal(err)
		}
		data := bytes.Clone(v.Data)
		v.Release()
		br := &blockingReader{first: data[:700], rest: data[700:], started: make(chan struct{}), release: make(chan struct{})}
		fillDone := make(chan error, 1)
		go func() {
			_, err := l.AppendAtFrom(b0.Max, len(data), br)
			fillDone <- err
		}()
		<-br.started
		if b := l.Bounds(); b.Max != b0.Max {
			t.Fatalf("max %d visible before the fill completed (was %d)", b.Max, b0.Max)
		}
		if v, err := l.Read(b0.Max, 10); err != nil || len(v.Data) != 0 {
			t.Fatalf("Read at the old max: %d bytes, %v", len(v.Data), err)
		}
		if err := l.checkpointNow(false); err != nil {
			t.Fatalf("checkpoint during a fill: %v", err)
		}
		truncDone, appendDone := make(chan error, 1), make(chan error, 1)
		go func() { truncDone <- l.Truncate(b0.Max) }()
		go func() {
			_, err := l.AppendAt(b0.Max, []byte{1})
			appendDone <- err
		}()
		synctest.Wait() // everyone is blocked: the writers wait for the fill
		select {
		case <-fillDone:
			t.Fatal("fill ended before its reader was released")
		case err := <-truncDone:
			t.Fatalf("Truncate did not wait for the fill: %v", err)
		case err := <-appendDone:
			t.Fatalf("AppendAt did not wait for the fill: %v", err)
		default:
		}
		close(br.release)
		if err := <-fillDone; err != nil {
			t.Fatalf("fill: %v", err)
		}
		// The writers ran after the fill: AppendAt at the old max is a
		// mismatch now; Truncate to the old max finds a record boundary or
		// refuses a non-boundary.
		if err := <-appendDone; !errors.Is(err, store.ErrOffsetMismatch) {
			t.Fatalf("AppendAt during the fill: %v, want a mismatch after it", err)
		}
		if err := <-truncDone; err != nil && !errors.Is(err, store.ErrNotBoundary) {
			t.Fatalf("Truncate during the fill: %v", err)
		}

		// Close while a fill waits: Close returns; the fill fails.
		at := l.Bounds().Max
		br = &blockingReader{first: []byte{1, 2}, started: make(chan struct{}), release: make(chan struct{}), fail: io.ErrClosedPipe}
		go func() {
			_, err := l.AppendAtFrom(at, 100, br)
			fillDone <- err
		}()
		<-br.started
		closed = true
		if err := l.Close(); err != nil {
			t.Fatalf("Close during a fill: %v", err)
		}
		close(br.release)
		if err := <-fillDone; !errors.Is(err, io.ErrClosedPipe) {
			t.Fatalf("fill interrupted by Close: %v", err)
		}
	})
}

// TestCommitLogAppendAtFromCrash: a process crash in the middle of a fill
// (the files as the page cache holds them) recovers to a record boundary
// no further than the bytes delivered, holding the master's bytes, and
// replication resumes from there.
func TestCommitLogAppendAtFromCrash(t *testing.T) {
	const seg = 8192
	r := rand.New(rand.NewSource(9))
	master := mustOpen(t, t.TempDir(), testOptions(t, seg))
	defer mustClose(t, master)
	for master.Bounds().Max < 2*seg {
		mustAppend(t, master, testMsg("T", 0, 50+r.Intn(400), r.Int63()))
	}
	mb := master.Bounds()
	dir := t.TempDir()
	l := mustOpen(t, dir, testOptions(t, seg))
	replicateFrom(t, master, l, 3000, r, 1000)
	at := l.Bounds().Max
	v, err := master.Read(at, 4000)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Clone(v.Data)
	v.Release()
	br := &blockingReader{first: data[:2500], rest: data[2500:], started: make(chan struct{}), release: make(chan struct{})}
	fillDone := make(chan error, 1)
	go func() {
		_, err := l.AppendAtFrom(at, len(data), br)
		fillDone <- err
	}()
	<-br.started
	crashed := copyDir(t, dir)
	close(br.release)
	if err := <-fillDone; err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)

	c := mustOpen(t, crashed, testOptions(t, seg))
	defer mustClose(t, c)
	got := c.Bounds().Max
	if got > at+2500 || got < at-1000 {
		t.Fatalf("recovered max %d, fill started at %d with 2500 bytes delivered", got, at)
	}
	readAll(t, c) // every record verifies
	replicateFrom(t, master, c, mb.Max, r, 3000)
	sameBytes(t, master, c, 0, mb.Max)
}

// TestCommitLogPrefaultWindow: a master's log populates at most a window
// ahead of its writer, in whole chunks that never overlap, and follows the
// writer as it moves; a replica's log (written with pwrite) populates
// nothing, until it is promoted and appends itself.
func TestCommitLogPrefaultWindow(t *testing.T) {
	const seg = 16 << 20
	const ahead = 4 << 20
	opts := testOptions(t, seg)
	opts.PrefaultAhead = ahead
	r := rand.New(rand.NewSource(3))
	master := mustOpen(t, t.TempDir(), opts)
	defer mustClose(t, master)
	// frontier returns the end of the populated run that starts at the
	// max offset, failing if any segment (or the spare) is populated
	// beyond limit.
	frontier := func(l *Log, limit int64) int64 {
		t.Helper()
		l.mu.Lock()
		segs := append(l.segList(), l.spare)
		l.mu.Unlock()
		at := l.Bounds().Max
		for _, s := range segs {
			if s == nil {
				continue
			}
			pop := s.popTo.Load()
			if pop > pageSize && s.start+pop > limit {
				t.Fatalf("segment %d populated to %d, beyond %d (max %d)", s.start, s.start+pop, limit, l.Bounds().Max)
			}
			if s.start <= at && s.start+pop > at {
				at = s.start + pop
			}
		}
		return at
	}
	// waitPopulated waits until l is populated up to want, never beyond
	// limit on the way. The writer wakes the allocator once per warmChunk
	// it crosses, so want is a chunk short of the window.
	waitPopulated := func(l *Log, want, limit int64) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); frontier(l, limit) < want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("at max %d populated to %d, want at least %d", l.Bounds().Max, frontier(l, limit), want)
			}
		}
	}
	for master.Bounds().Max < 2*seg+seg/2 {
		mustAppend(t, master, testMsg("T", 0, 4000, r.Int63()))
		if master.Bounds().Max%(5<<20) < 4200 {
			mx := master.Bounds().Max
			waitPopulated(master, mx+ahead-warmChunk, mx+ahead+warmChunk)
		}
	}

	replica := mustOpen(t, t.TempDir(), opts)
	defer mustClose(t, replica)
	replicateFrom(t, master, replica, master.Bounds().Max, r, 256<<10)
	sameBytes(t, master, replica, 0, master.Bounds().Max)
	// A replica populates nothing: it never gets to, so no wait can be
	// too short here; look twice, the second time after the allocator has
	// had its chances.
	for range 2 {
		if got, mx := frontier(replica, 0), replica.Bounds().Max; got != mx {
			t.Fatalf("replica at %d populated to %d, want nothing", mx, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Promoted: its own appends populate ahead again.
	for mx := replica.Bounds().Max; replica.Bounds().Max < mx+3*warmChunk; {
		mustAppend(t, replica, testMsg("T", 0, 4000, r.Int63()))
	}
	mx := replica.Bounds().Max
	waitPopulated(replica, mx+ahead-warmChunk, mx+ahead+warmChunk)

	// Concurrent prefaulting of one fresh segment: the claims tile it.
	s, err := createSegment(vfs.Default, t.TempDir()+"/seg", 0, seg, master.log, master.now())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	var wg sync.WaitGroup
	var mu sync.Mutex
	worked := 0
	const chunk = 256 << 10
	for range 4 {
		wg.Go(func() {
			for s.prefaultChunk(0, chunk) {
				mu.Lock()
				worked++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if s.popTo.Load() != seg || worked != seg/chunk {
		t.Fatalf("populated to %d in %d chunks, want %d in %d", s.popTo.Load(), worked, seg, seg/chunk)
	}
}

// TestCommitLogReplicaRetention: on a replica (prefault on, populating
// nothing), the allocator does not keep sealed segments pinned, so
// retention deletes them.
func TestCommitLogReplicaRetention(t *testing.T) {
	const seg = 1 << 20
	r := rand.New(rand.NewSource(9))
	master := mustOpen(t, t.TempDir(), testOptions(t, seg))
	defer mustClose(t, master)
	for master.Bounds().Max < 5*seg+1000 {
		mustAppend(t, master, testMsg("T", 0, 4000, r.Int63()))
	}
	o := testOptions(t, seg)
	o.RetentionBytes = 3 * seg
	l := mustOpen(t, t.TempDir(), o)
	defer mustClose(t, l)
	replicateFrom(t, master, l, master.Bounds().Max, r, 64<<10)
	deadline := time.Now().Add(20 * time.Second)
	for l.Bounds().Min < 3*seg {
		if time.Now().After(deadline) {
			var pinned []int64
			for _, s := range l.segList() {
				if s.refs.Load() > 1 {
					pinned = append(pinned, s.start)
				}
			}
			t.Fatalf("retention stuck at min %d (max %d); pinned segments %v", l.Bounds().Min, l.Bounds().Max, pinned)
		}
		if _, err := l.enforceRetention(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	sameBytes(t, master, l, l.Bounds().Min, l.Bounds().Max)
}

// badViews is a view reader that misbehaves after good bytes: it hands
// out a view longer than asked (long), nothing at all forever (empty), or
// fails (err).
type badViews struct {
	good  []byte
	long  bool
	empty bool
	err   error
}

func (b *badViews) Read([]byte) (int, error) { return 0, errors.New("badViews: Read called") }

func (b *badViews) View(max int) ([]byte, error) {
	if len(b.good) > 0 {
		n := min(max, len(b.good), 700)
		v := b.good[:n]
		b.good = b.good[n:]
		return v, nil
	}
	switch {
	case b.long:
		return make([]byte, max+1), nil
	case b.empty:
		return nil, nil
	}
	return nil, b.err
}

// TestCommitLogAppendAtFromViewErrors: an AppendAtFrom from views that
// fail (the reader's error, io.EOF before the end, a view longer than
// asked, views that never deliver) leaves the log as it was, the bytes
// it wrote zeroed again; the inline walk then starts again from the
// mapping, and the records that follow are dispatched, with the right
// queue offsets.
func TestCommitLogAppendAtFromViewErrors(t *testing.T) {
	const seg = 1 << 20
	r := rand.New(rand.NewSource(12))
	master := mustOpen(t, t.TempDir(), testOptions(t, seg))
	defer mustClose(t, master)
	for range 40 {
		mustAppend(t, master, testMsg("T", 3, 1+r.Intn(3000), r.Int63()))
	}
	mend := master.Bounds().Max
	_, want := dispatchState(master)
	replica := mustOpen(t, t.TempDir(), testOptions(t, seg))
	defer mustClose(t, replica)
	replicateVia(t, master, replica, mend/3, r, 5000, true) // a partial record is pending

	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		src  *badViews
		want error
	}{
		{"reader error", &badViews{err: boom}, boom},
		{"early EOF", &badViews{err: io.EOF}, io.ErrUnexpectedEOF},
		{"view too long", &badViews{long: true}, nil},
		{"no progress", &badViews{empty: true}, io.ErrNoProgress},
	} {
		b0 := replica.Bounds()
		v, err := master.Read(b0.Max, 6000)
		if err != nil {
			t.Fatal(err)
		}
		tc.src.good = bytes.Clone(v.Data[:3000])
		n := len(v.Data)
		v.Release()
		_, err = replica.AppendAtFrom(b0.Max, n, tc.src)
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Fatalf("%s: error %v, want %v", tc.name, err, tc.want)
		}
		if b := replica.Bounds(); b != b0 {
			t.Fatalf("%s: bounds %+v after a failed AppendAtFrom, want %+v", tc.name, b, b0)
		}
		s := replica.segList()[0]
		if tail := s.data[b0.Max-s.start : b0.Max-s.start+int64(n)]; !bytes.Equal(tail, make([]byte, n)) {
			t.Fatalf("%s: bytes of the failed AppendAtFrom left in the segment", tc.name)
		}
	}
	replicateVia(t, master, replica, mend, r, 5000, true)
	d, got := dispatchState(replica)
	if d != mend || !maps.EqualFunc(got, want, maps.Equal) {
		t.Fatalf("dispatched %d (want %d), queues %v (want %v)", d, mend, got, want)
	}
	sameBytes(t, master, replica, 0, mend)
}
