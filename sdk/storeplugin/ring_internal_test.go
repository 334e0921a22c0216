package storeplugin

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
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
