package storeplugin_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"

	goplugin "github.com/hashicorp/go-plugin"
	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/examples/store-plugin/filestore"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/sdk/storeplugin"
	"github.com/replicatorhq/replicator/sdk/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sharedStore is the example filestore plus SegmentFiles, so the host maps
// its files (which grow as they are written: the host remaps).
type sharedStore struct{ *filestore.Store }

func (s sharedStore) SegmentFile(base int64) (string, bool) {
	p := s.Path(base)
	_, err := os.Stat(p)
	return p, err == nil
}

func openShared(_ context.Context, req storeplugin.OpenRequest) (store.Store, error) {
	st, err := filestore.Open(req.Dir, req.SegmentSize)
	if err != nil {
		return nil, err
	}
	return sharedStore{st}, nil
}

func openPlain(_ context.Context, req storeplugin.OpenRequest) (store.Store, error) {
	return filestore.Open(req.Dir, req.SegmentSize)
}

func TestPluginStoreConformanceMmap(t *testing.T) {
	storetest.Run(t, func(t *testing.T, dir string, segSize int64) store.Store {
		cl, err := storetest.ServePlugin(t, openShared).Open(context.Background(),
			storeplugin.OpenRequest{Dir: dir, SegmentSize: segSize}, storeplugin.ClientConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if !cl.SharesFiles() {
			t.Fatal("the client does not map the shared files")
		}
		return cl
	})
}

func TestPluginStoreConformanceReadStream(t *testing.T) {
	// Tiny chunks and read-ahead: many chunks per segment.
	// The gRPC Append stream instead of the side channel, too.
	storetest.Run(t, storetest.PluginFactory(openShared, storeplugin.ClientConfig{DisableMmap: true, ChunkBytes: 3000, ReadAheadBytes: 7000, BatchBytes: 4096, DisableSideChannel: true}))
}

// TestPluginStoreSideChannel: appends use the unix-socket side channel by
// default and the gRPC stream when it is disabled; both store the same.
func TestPluginStoreSideChannel(t *testing.T) {
	for _, disable := range []bool{false, true} {
		cl := openClient(t, openPlain, storeplugin.ClientConfig{DisableSideChannel: disable})
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				for j := range 50 {
					if _, err := cl.Append(context.Background(), &record.Message{Topic: "T", Body: []byte(fmt.Sprint(i, j))}); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		st := cl.Stats()
		if st.SideChannel == disable || st.Ops != 400 {
			t.Fatalf("DisableSideChannel=%v: stats %+v", disable, st)
		}
		recs, _, err := cl.ReadMessages(0, 1000)
		if err != nil || len(recs) != 400 {
			t.Fatalf("read back %d records: %v", len(recs), err)
		}
		if err := cl.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// probeStore records, for each AppendAt, whether the host had already
// written the bytes into the segment file (an in-place append).
type probeStore struct {
	sharedStore
	mu         sync.Mutex
	prewritten []bool
}

func (p *probeStore) AppendAt(offset int64, data []byte) (int64, error) {
	b := p.Bounds()
	base := offset - (offset-b.LastSegmentStart)%b.SegmentSize
	got := make([]byte, len(data))
	pre := false
	if f, err := os.Open(p.Path(base)); err == nil {
		n, _ := f.ReadAt(got, offset-base)
		f.Close()
		pre = n == len(data) && bytes.Equal(got, data)
	}
	p.mu.Lock()
	p.prewritten = append(p.prewritten, pre)
	p.mu.Unlock()
	return p.sharedStore.AppendAt(offset, data)
}

type noWritesStore struct{ *probeStore }

func (noWritesStore) NoHostWrites() {}

// TestPluginStoreNoHostWrites: a store that shares its files writes the
// slave's bytes in place (the host pwrites them first) unless it is marked
// NoHostWrites; then they come on the append stream.
func TestPluginStoreNoHostWrites(t *testing.T) {
	for _, noWrites := range []bool{false, true} {
		var probe *probeStore
		cl := openClient(t, func(ctx context.Context, req storeplugin.OpenRequest) (store.Store, error) {
			st, err := openShared(ctx, req)
			if err != nil {
				return nil, err
			}
			probe = &probeStore{sharedStore: st.(sharedStore)}
			if noWrites {
				return noWritesStore{probe}, nil
			}
			return probe, nil
		}, storeplugin.ClientConfig{})
		data := bytes.Repeat([]byte{9}, 1000)
		for i := range 3 {
			if _, err := cl.AppendAt(int64(i*1000), data); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.Flush(); err != nil { // waits for the in-place acks
			t.Fatal(err)
		}
		probe.mu.Lock()
		got := fmt.Sprint(probe.prewritten)
		probe.mu.Unlock()
		// The first creates the segment; contiguous in-place appends may be
		// adopted by one AppendAt.
		ok := got == "[false true true]" || got == "[false true]"
		want := "[false true true] or [false true]"
		if noWrites {
			want = "[false false false]"
			ok = got == want
		}
		if !ok {
			t.Fatalf("NoHostWrites=%v: prewritten %s, want %s", noWrites, got, want)
		}
		cl.Close()
	}
}

func openClient(t *testing.T, open storeplugin.Opener, cfg storeplugin.ClientConfig) *storeplugin.Client {
	t.Helper()
	cl, err := storetest.ServePlugin(t, open).Open(context.Background(),
		storeplugin.OpenRequest{Dir: t.TempDir(), SegmentSize: 1 << 20}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// gatedStore blocks Append until the gate opens (once).
type gatedStore struct {
	store.Store
	entered chan struct{}
	gate    chan struct{}
	once    sync.Once
}

func (g *gatedStore) Append(ctx context.Context, m *record.Message) (store.AppendResult, error) {
	g.once.Do(func() {
		close(g.entered)
		<-g.gate
	})
	return g.Store.Append(ctx, m)
}

// TestPluginStoreBatching: appends that pile up while a batch is in flight
// go out together in one batch with one ack.
func TestPluginStoreBatching(t *testing.T) {
	g := &gatedStore{entered: make(chan struct{}), gate: make(chan struct{})}
	cl := openClient(t, func(ctx context.Context, req storeplugin.OpenRequest) (store.Store, error) {
		st, err := filestore.Open(req.Dir, req.SegmentSize)
		g.Store = st
		return g, err
	}, storeplugin.ClientConfig{MaxInFlight: 1})
	defer cl.Close()

	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n+1)
	put := func(i int) {
		defer wg.Done()
		_, err := cl.Append(context.Background(), &record.Message{Topic: "T", Body: make([]byte, 1000+i)})
		errs <- err
	}
	wg.Add(1)
	go put(0)
	<-g.entered // batch 1 is in the plugin, held at the gate
	for i := 1; i <= n; i++ {
		wg.Add(1)
		go put(i)
	}
	for cl.Stats().Queued < n {
		runtime.Gosched()
	}
	close(g.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if s := cl.Stats(); s.Batches != 2 || s.Ops != n+1 {
		t.Fatalf("stats %+v, want 2 batches carrying %d appends", s, n+1)
	}
	// BatchBytes splits a large backlog.
	if recs, _, err := cl.ReadMessages(0, 1000); err != nil || len(recs) != n+1 {
		t.Fatalf("read back %d records, %v", len(recs), err)
	}
}

// TestPluginStoreMmapAfterTruncate: a truncate drops the host's mappings,
// so bytes appended after it are read fresh, and releasing a view taken
// before it is safe.
func TestPluginStoreMmapAfterTruncate(t *testing.T) {
	cl := openClient(t, openShared, storeplugin.ClientConfig{})
	defer cl.Close()
	put := func(body string) store.AppendResult {
		a, err := cl.Append(context.Background(), &record.Message{Topic: "T", Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	var res []store.AppendResult
	for i := range 20 {
		res = append(res, put(fmt.Sprint("old-", i)))
	}
	v, err := cl.Read(res[10].Offset, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Truncate(res[5].Offset); err != nil {
		t.Fatal(err)
	}
	v.Release()
	for i := range 20 {
		put(fmt.Sprint("new-", i, "-longer"))
	}
	recs, _, err := cl.ReadMessages(res[5].Offset, 1)
	if err != nil || string(recs[0].Body) != "new-0-longer" {
		t.Fatalf("ReadMessages after truncate: %v %v", recs, err)
	}
	v, err = cl.Read(res[5].Offset, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Release()
	rec, err := record.Decode(v.Data)
	if err != nil || string(rec.Body) != "new-0-longer" {
		t.Fatalf("mapped read after truncate: %q, %v", rec.Body, err)
	}
}

// TestPluginStoreShutdown: once the plugin is gone every call fails with
// ErrPluginShutdown and watchers are woken.
func TestPluginStoreShutdown(t *testing.T) {
	client, server := goplugin.TestPluginGRPCConn(t, false, map[string]goplugin.Plugin{"store": &storeplugin.Plugin{Open: openPlain}})
	raw, err := client.Dispense("store")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := raw.(*storeplugin.Conn).Open(context.Background(), storeplugin.OpenRequest{Dir: t.TempDir(), SegmentSize: 1 << 20}, storeplugin.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Append(context.Background(), &record.Message{Topic: "T", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 1)
	cancel := cl.Watch(ch)
	defer cancel()
	server.Stop()
	<-ch // the client noticed (its Watch stream broke)
	if _, err := cl.Append(context.Background(), &record.Message{Topic: "T", Body: []byte("y")}); !errors.Is(err, storeplugin.ErrPluginShutdown) {
		t.Fatalf("Append on a dead plugin: %v, want ErrPluginShutdown", err)
	}
	if _, err := cl.AppendAt(cl.Bounds().Max, []byte("y")); !errors.Is(err, storeplugin.ErrPluginShutdown) {
		t.Fatalf("AppendAt on a dead plugin: %v", err)
	}
	if err := cl.Truncate(0); !errors.Is(err, storeplugin.ErrPluginShutdown) {
		t.Fatalf("Truncate on a dead plugin: %v", err)
	}
	if err := cl.Close(); !errors.Is(err, storeplugin.ErrPluginShutdown) {
		t.Fatalf("Close on a dead plugin: %v", err)
	}
	client.Close()
}

// failingStore refuses every AppendAt once armed.
type failingStore struct {
	sharedStore
	armed chan struct{}
}

func (f failingStore) AppendAt(offset int64, data []byte) (int64, error) {
	select {
	case <-f.armed:
		return 0, fmt.Errorf("disk gone: %w", store.ErrCorrupt)
	default:
		return f.sharedStore.AppendAt(offset, data)
	}
}

// TestPluginStoreInPlaceFailure: AppendAt into a shared segment returns
// before the plugin acks; a refusal then fails every later call, sticky.
func TestPluginStoreInPlaceFailure(t *testing.T) {
	armed := make(chan struct{})
	cl := openClient(t, func(ctx context.Context, req storeplugin.OpenRequest) (store.Store, error) {
		st, err := openShared(ctx, req)
		if err != nil {
			return nil, err
		}
		return failingStore{st.(sharedStore), armed}, nil
	}, storeplugin.ClientConfig{})
	defer cl.Close()
	data := bytes.Repeat([]byte{7}, 1000)
	max, err := cl.AppendAt(0, data) // creates the segment: through the stream
	if err != nil || max != 1000 {
		t.Fatalf("first AppendAt: %d %v", max, err)
	}
	if max, err = cl.AppendAt(1000, data); err != nil || max != 2000 { // in place
		t.Fatalf("in-place AppendAt: %d %v", max, err)
	}
	if b := cl.Bounds(); b.Max != 2000 {
		t.Fatalf("Max %d after an in-place append", b.Max)
	}
	v, err := cl.Read(1000, 1000)
	if err != nil || !bytes.Equal(v.Data, data) {
		t.Fatalf("reading in-place bytes: %v", err)
	}
	v.Release()
	close(armed)
	if _, err := cl.AppendAt(2000, data); err != nil { // in place: accepted, refused later
		t.Fatalf("in-place AppendAt: %v", err)
	}
	if err := cl.Flush(); !errors.Is(err, store.ErrCorrupt) { // drains, then reports
		t.Fatalf("Flush after a refused in-place append: %v, want ErrCorrupt", err)
	}
	if _, err := cl.AppendAt(3000, data); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("AppendAt after a refused in-place append: %v, want ErrCorrupt", err)
	}
}

// TestPluginStoreHostEncoded: with a store that takes host writes, Appends
// after the first of each queue are encoded and written by the host (no
// round trip); the plugin adopts them: the same records, queue offsets and
// results as through the plugin, across a segment roll and a restart.
func TestPluginStoreHostEncoded(t *testing.T) {
	dir := t.TempDir()
	open := func(cfg storeplugin.ClientConfig) *storeplugin.Client {
		cl, err := storetest.ServePlugin(t, openShared).Open(context.Background(),
			storeplugin.OpenRequest{Dir: dir, SegmentSize: 1 << 20, Options: map[string]string{"max_message_size": "65536"}}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	cl := open(storeplugin.ClientConfig{})
	type put struct {
		msg *record.Message
		res store.AppendResult
	}
	var mu sync.Mutex
	var puts []put
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 100 {
				m := &record.Message{Topic: fmt.Sprint("T", g%2), QueueID: int32(i % 3), Body: bytes.Repeat([]byte{byte(i)}, 3000+i)}
				res, err := cl.Append(context.Background(), m)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				puts = append(puts, put{m, res})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// One producer: after the first Append of a queue, only a segment roll
	// (at most one in 150 KB) goes to the plugin. (Concurrent producers also
	// go to it while an earlier Append to it awaits its answer.)
	before := cl.Stats().HostEncoded
	for range 50 {
		m := &record.Message{Topic: "T0", QueueID: 1, Body: bytes.Repeat([]byte{7}, 3000)}
		res, err := cl.Append(context.Background(), m)
		if err != nil {
			t.Fatal(err)
		}
		puts = append(puts, put{m, res})
	}
	if n := cl.Stats().HostEncoded - before; n < 48 {
		t.Fatalf("only %d of 50 sequential appends host-encoded: %+v", n, cl.Stats())
	}
	check := func(cl *storeplugin.Client) {
		t.Helper()
		byOffset := map[int64]put{}
		next := map[string]int64{}
		for _, p := range puts {
			byOffset[p.res.Offset] = p
		}
		n := 0
		for off := int64(0); ; {
			recs, nxt, err := cl.ReadMessages(off, 64)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) == 0 {
				break
			}
			for _, r := range recs {
				p, ok := byOffset[r.PhysicalOffset]
				if !ok || !bytes.Equal(r.Message.Body, p.msg.Body) || r.QueueOffset != p.res.QueueOffset || r.StoreTimestamp != p.res.StoreTimestamp {
					t.Fatalf("record at %d differs from its Append's result %+v", r.PhysicalOffset, p.res)
				}
				k := fmt.Sprint(r.Message.Topic, "/", r.Message.QueueID)
				if r.QueueOffset != next[k] {
					t.Fatalf("queue %s: offset %d, want %d", k, r.QueueOffset, next[k])
				}
				next[k]++
				n++
			}
			off = nxt
		}
		if n != len(puts) {
			t.Fatalf("%d records, want %d", n, len(puts))
		}
	}
	check(cl)
	if b := cl.Bounds(); b.LastSegmentStart == 0 {
		t.Fatalf("no segment roll: %+v", b)
	}
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	cl = open(storeplugin.ClientConfig{DisableHostAppends: true})
	defer cl.Close()
	check(cl)
	res, err := cl.Append(context.Background(), &record.Message{Topic: "T0", QueueID: 0, Body: []byte("after")})
	if err != nil || cl.Stats().HostEncoded != 0 {
		t.Fatalf("append with host appends off: %+v %v %+v", res, err, cl.Stats())
	}
}
