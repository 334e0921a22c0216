package storeplugin

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/protobuf/proto"

	"github.com/replicatorhq/replicator/sdk/internal/shmring"
	"github.com/replicatorhq/replicator/sdk/proto/storev1"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/sdk/store/memstore"
)

// openRingClient serves open in process (go-plugin's test connection: the
// side channels and the ring are real) and opens a client with cfg.
func openRingClient(t *testing.T, open Opener, cfg ClientConfig) *Client {
	t.Helper()
	if !shmring.Supported {
		t.Skip("no shared-memory ring on this platform")
	}
	client, _ := goplugin.TestPluginGRPCConn(t, false, map[string]goplugin.Plugin{"store": &Plugin{Open: open}})
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense("store")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := raw.(*Conn).Open(context.Background(), OpenRequest{Dir: t.TempDir(), SegmentSize: 1 << 20}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func openMem(context.Context, OpenRequest) (store.Store, error) {
	return memstore.New(1 << 20), nil
}

// gateAppendAt blocks the store's AppendAt from its second call until the
// gate opens.
type gateAppendAt struct {
	store.Store
	mu      sync.Mutex
	calls   int
	entered chan struct{}
	gate    chan struct{}
}

func (g *gateAppendAt) AppendAt(off int64, data []byte) (int64, error) {
	g.mu.Lock()
	g.calls++
	n := g.calls
	g.mu.Unlock()
	if n == 2 {
		close(g.entered)
		<-g.gate
	}
	return g.Store.AppendAt(off, data)
}

// waitFor polls cond (a real plugin's progress, not time) until it holds or
// the failure bound passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a failure bound, not a wait
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		runtime.Gosched()
	}
}

// TestPluginRingFull: queued AppendAt go through the ring (after the first,
// which opens the stream on the socket); while the plugin is stuck the host
// fills the ring and waits for room, not memory; once the plugin moves on
// every byte lands in order, and Read serves the ring's bytes (from the
// tail) and older ones (after the ring is applied).
func TestPluginRingFull(t *testing.T) {
	g := &gateAppendAt{entered: make(chan struct{}), gate: make(chan struct{})}
	cl := openRingClient(t, func(ctx context.Context, req OpenRequest) (store.Store, error) {
		st, _ := openMem(ctx, req)
		g.Store = st
		return g, nil
	}, ClientConfig{RingBytes: shmring.MinData, TailBytes: 64 << 10})
	defer cl.Close()
	var all []byte
	next := func(i int) []byte {
		b := bytes.Repeat([]byte{byte(i)}, 3000+i%1000)
		all = append(all, b...)
		return b
	}
	if _, err := cl.AppendAt(0, next(0)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var total int
	go func() {
		off := int64(len(all))
		for i := 1; i < 200; i++ {
			b := next(i)
			if _, err := cl.AppendAt(off, b); err != nil {
				done <- err
				return
			}
			off += int64(len(b))
		}
		total = int(off)
		done <- nil
	}()
	<-g.entered
	waitFor(t, "the host waiting on a full ring", func() bool { return cl.Stats().RingWaits > 0 })
	close(g.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cl.app.drain()
	if err := cl.check(); err != nil {
		t.Fatal(err)
	}
	st := cl.Stats()
	if !st.Ring || st.RingEntries != 199 || st.Ops != 1 {
		t.Fatalf("stats %+v: want a ring with 199 entries, one op on the socket", st)
	}
	for off := 0; off < total; {
		v, err := cl.Read(int64(off), 1<<20)
		if err != nil || len(v.Data) == 0 || !bytes.Equal(v.Data, all[off:off+len(v.Data)]) {
			t.Fatalf("read at %d: %d bytes, %v", off, len(v.Data), err)
		}
		off += len(v.Data)
	}
	b := g.Store.Bounds()
	if b.Max != int64(total) {
		t.Fatalf("the plugin's store ends at %d, want %d", b.Max, total)
	}
}

// memfdRing makes a ring and maps it again as the plugin does: the
// producer's and the consumer's ends, unmapped at the test's end.
func memfdRing(t *testing.T) (p, c *shmring.Ring) {
	t.Helper()
	p, f, err := shmring.Create(shmring.MinData)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, err = shmring.Attach(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c
}

// TestPluginRingCorrupt: the plugin's end checks every entry before use:
// one whose length runs past what the host published stops the ring with
// ErrCorrupt (the append channel then closes), no panic, and the entries
// before it are in the store. A store that refuses an entry stops the ring
// too, its error in the header for the host, which is notified.
func TestPluginRingCorrupt(t *testing.T) {
	if !shmring.Supported {
		t.Skip("no shared-memory ring on this platform")
	}
	p, c := memfdRing(t)
	st := memstore.New(1 << 20)
	notified := 0
	rc := &ringConsumer{r: c, st: st, notify: func() error { notified++; return nil }}
	publish := func(off int64, data []byte) []byte {
		room, ok, err := p.Reserve(len(data))
		if !ok || err != nil {
			t.Fatal(ok, err)
		}
		copy(room, data)
		p.Publish(off)
		return room
	}
	publish(0, bytes.Repeat([]byte{1}, 1000))
	room := publish(1000, bytes.Repeat([]byte{2}, 8))
	// The entry's length sits at 8 in its header, EntryHeader bytes before
	// its room: claim 1 MiB.
	hdr := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&room[0]), -shmring.EntryHeader)), shmring.EntryHeader)
	binary.NativeEndian.PutUint32(hdr[8:], 1<<20)
	if err := rc.consume(); !errors.Is(err, shmring.ErrCorrupt) {
		t.Fatalf("consume of a corrupt entry: %v, want ErrCorrupt", err)
	}
	if b := st.Bounds(); b.Max != 1000 {
		t.Fatalf("the store ends at %d, want the 1000 bytes before the bad entry", b.Max)
	}

	// A refusal: the next entry is not at the store's max offset.
	p2, c2 := memfdRing(t)
	p = p2
	rc = &ringConsumer{r: c2, st: st, notify: func() error { notified++; return nil }}
	publish(5000, []byte("misplaced"))
	publish(5009, []byte("never applied"))
	if err := rc.consume(); err != nil || notified != 1 {
		t.Fatalf("consume of a refused entry: %v, %d notifications", err, notified)
	}
	detail, failed := p2.Failure()
	if !failed {
		t.Fatal("the refusal is not in the ring's header")
	}
	var e storev1.Error
	if err := proto.Unmarshal(detail, &e); err != nil || !errors.Is(decodeError(&e), store.ErrOffsetMismatch) {
		t.Fatalf("the header's error: %v (%v), want ErrOffsetMismatch", decodeError(&e), err)
	}
	if err := rc.consume(); err != nil || notified != 1 || st.Bounds().Max != 1000 {
		t.Fatalf("a stopped ring applied more: %v, max %d", err, st.Bounds().Max)
	}
}

// fromStore is a store.AppenderFrom over a memstore: it takes each
// AppendAtFrom's bytes as views when the reader is a store.Viewer (and
// counts them), else with io.ReadFull, and refuses offsets in refuse.
type fromStore struct {
	store.Store
	read   bool // read with Read, not View
	calls  int
	views  int
	refuse int64
}

func (f *fromStore) AppendAtFrom(off int64, n int, r io.Reader) (int64, error) {
	f.calls++
	if off == f.refuse {
		return f.Bounds().Max, fmt.Errorf("fromStore: append at %d: %w", off, store.ErrOffsetMismatch)
	}
	vr, ok := r.(store.Viewer)
	if !ok {
		return 0, errors.New("fromStore: the reader is not a store.Viewer")
	}
	var b []byte
	if f.read {
		b = make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return 0, err
		}
	} else {
		for len(b) < n {
			v, err := vr.View(n - len(b))
			if err != nil {
				return 0, err
			}
			f.views++
			b = append(b, v...)
		}
	}
	if v, err := vr.View(1); len(v) != 0 || !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("fromStore: past the entry's end: %d bytes, %v", len(v), err)
	}
	return f.AppendAt(off, b)
}

// TestPluginRingAppenderFrom: a store that is a store.AppenderFrom gets
// each ring entry through AppendAtFrom, as one view of the entry's bytes
// (or through Read), and its refusal stops the ring as AppendAt's does.
func TestPluginRingAppenderFrom(t *testing.T) {
	if !shmring.Supported {
		t.Skip("no shared-memory ring on this platform")
	}
	for _, read := range []bool{false, true} {
		p, c := memfdRing(t)
		fs := &fromStore{Store: memstore.New(1 << 20), read: read, refuse: -1}
		notified := 0
		rc := &ringConsumer{r: c, st: fs, notify: func() error { notified++; return nil }}
		var all []byte
		for i := range 5 {
			data := bytes.Repeat([]byte{byte(i + 1)}, 700+i*300)
			room, ok, err := p.Reserve(len(data))
			if !ok || err != nil {
				t.Fatal(ok, err)
			}
			copy(room, data)
			p.Publish(int64(len(all)))
			all = append(all, data...)
		}
		if err := rc.consume(); err != nil || notified != 0 {
			t.Fatalf("read=%v: consume: %v, %d notifications", read, err, notified)
		}
		if fs.calls != 5 || (!read && fs.views != 5) {
			t.Fatalf("read=%v: %d AppendAtFrom calls with %d views, want 5 with one view each", read, fs.calls, fs.views)
		}
		v, err := fs.Read(0, len(all))
		if err != nil || !bytes.Equal(v.Data, all) {
			t.Fatalf("read=%v: the store holds %d bytes (%v), not the ring's %d", read, len(v.Data), err, len(all))
		}
		v.Release()

		// A refusal from AppendAtFrom: in the header, the ring stopped.
		fs.refuse = int64(len(all))
		room, _, _ := p.Reserve(8)
		copy(room, "refused!")
		p.Publish(fs.refuse)
		if err := rc.consume(); err != nil || notified != 1 {
			t.Fatalf("read=%v: consume of a refused entry: %v, %d notifications", read, err, notified)
		}
		detail, failed := p.Failure()
		var e storev1.Error
		if !failed || proto.Unmarshal(detail, &e) != nil || !errors.Is(decodeError(&e), store.ErrOffsetMismatch) {
			t.Fatalf("read=%v: the header's error: %v (failed %v), want ErrOffsetMismatch", read, decodeError(&e), failed)
		}
	}
}
