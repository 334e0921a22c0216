package storeplugin_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

func openPlain(_ context.Context, req storeplugin.OpenRequest) (store.Store, error) {
	return filestore.Open(req.Dir, req.SegmentSize)
}

// TestPluginStoreConformance: the example filestore through the gRPC shim
// and the host's client, defaults (side channel, tail, queued AppendAt).
// plugins/commitlog/cmd runs the suite with a real plugin process.
func TestPluginStoreConformance(t *testing.T) {
	storetest.Run(t, storetest.PluginFactory(openPlain, storeplugin.ClientConfig{}))
}

// TestPluginStoreConformanceFramed: the host frames Appends itself
// (ClientConfig.FrameAppends) once it knows each queue's next offset.
func TestPluginStoreConformanceFramed(t *testing.T) {
	storetest.Run(t, storetest.PluginFactory(openPlain, storeplugin.ClientConfig{FrameAppends: true}))
}

// TestPluginStoreConformanceReadStream: every read through ReadStream (no
// tail), with tiny chunks (many per segment), and the
// gRPC Append stream instead of the side channel, every AppendAt waiting
// for its ack.
func TestPluginStoreConformanceReadStream(t *testing.T) {
	storetest.Run(t, storetest.PluginFactory(openPlain, storeplugin.ClientConfig{TailBytes: -1, ChunkBytes: 3000, BatchBytes: 4096, DisableSideChannel: true, SyncAppendAt: true}))
}

// TestPluginStoreConformanceSmallTail: a tail of about one block, so reads
// fall off its start onto ReadStream all the time.
func TestPluginStoreConformanceSmallTail(t *testing.T) {
	storetest.Run(t, storetest.PluginFactory(openPlain, storeplugin.ClientConfig{TailBytes: 300 << 10, ChunkBytes: 5000}))
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

// TestPluginStoreTail: a master's reads right after its appends and a
// slave's reads of what it just appended are answered from the tail the
// acks brought back (no ReadStream); after a truncate the tail is dropped,
// so bytes appended after it are read fresh.
func TestPluginStoreTail(t *testing.T) {
	cl := openClient(t, openPlain, storeplugin.ClientConfig{})
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
		v, err := cl.Read(res[i].Offset, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if rec, err := record.Decode(v.Data); err != nil || string(rec.Body) != fmt.Sprint("old-", i) || rec.QueueOffset != int64(i) {
			t.Fatalf("read after append %d: %+v %v", i, rec, err)
		}
	}
	if s := cl.Stats(); s.TailReads != 20 || s.StreamReads != 0 {
		t.Fatalf("stats %+v: want 20 tail reads, no ReadStream", s)
	}
	old, err := cl.Read(res[10].Offset, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	oldBytes := bytes.Clone(old.Data)
	if err := cl.Truncate(res[5].Offset); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		put(fmt.Sprint("new-", i, "-longer"))
	}
	if !bytes.Equal(old.Data, oldBytes) {
		t.Fatal("a view taken before the truncate changed")
	}
	old.Release()
	recs, _, err := cl.ReadMessages(res[5].Offset, 1)
	if err != nil || string(recs[0].Body) != "new-0-longer" {
		t.Fatalf("ReadMessages after truncate: %v %v", recs, err)
	}
	v, err := cl.Read(res[5].Offset, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := record.Decode(v.Data); err != nil || string(rec.Body) != "new-0-longer" {
		t.Fatalf("read after truncate: %q, %v", rec.Body, err)
	}

	// A slave: what AppendAt wrote is read back without a round trip.
	slave := openClient(t, openPlain, storeplugin.ClientConfig{})
	defer slave.Close()
	max := cl.Bounds().Max
	for off := int64(0); off < max; {
		v, err := cl.Read(off, 700)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := slave.AppendAt(off, v.Data); err != nil {
			t.Fatal(err)
		}
		off += int64(len(v.Data))
	}
	before := slave.Stats().StreamReads
	for off := int64(0); off < max; {
		v, err := slave.Read(off, 1<<20)
		if err != nil || len(v.Data) == 0 {
			t.Fatalf("slave read at %d: %v", off, err)
		}
		off += int64(len(v.Data))
	}
	if s := slave.Stats(); s.StreamReads != before || s.TailReads == 0 {
		t.Fatalf("slave stats %+v: its reads went to ReadStream", s)
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
	store.Store
	armed chan struct{}
}

func (f failingStore) AppendAt(offset int64, data []byte) (int64, error) {
	select {
	case <-f.armed:
		return 0, fmt.Errorf("disk gone: %w", store.ErrCorrupt)
	default:
		return f.Store.AppendAt(offset, data)
	}
}

// openFailingClient opens a client with cfg on a plain plugin store wrapped
// in failingStore (armed makes it refuse).
func openFailingClient(t *testing.T, armed chan struct{}, cfg storeplugin.ClientConfig) *storeplugin.Client {
	t.Helper()
	return openClient(t, func(ctx context.Context, req storeplugin.OpenRequest) (store.Store, error) {
		st, err := openPlain(ctx, req)
		if err != nil {
			return nil, err
		}
		return failingStore{st, armed}, nil
	}, cfg)
}

// TestPluginStoreQueuedAppendAt: an AppendAt the host can check returns
// before the plugin acks (Bounds and Read see it at once); a refusal then
// fails every later call, sticky. One the host cannot check (an empty log)
// waits for the ack; with SyncAppendAt every one does and gets the
// plugin's error itself.
func TestPluginStoreQueuedAppendAt(t *testing.T) {
	for _, sync := range []bool{false, true} {
		armed := make(chan struct{})
		cl := openFailingClient(t, armed, storeplugin.ClientConfig{SyncAppendAt: sync})
		data := bytes.Repeat([]byte{7}, 1000)
		if max, err := cl.AppendAt(0, data); err != nil || max != 1000 { // empty log: waits
			t.Fatalf("sync=%v: first AppendAt: %d %v", sync, max, err)
		}
		if max, err := cl.AppendAt(1000, data); err != nil || max != 2000 {
			t.Fatalf("sync=%v: second AppendAt: %d %v", sync, max, err)
		}
		if b := cl.Bounds(); b.Max != 2000 {
			t.Fatalf("sync=%v: Max %d after two AppendAt", sync, b.Max)
		}
		v, err := cl.Read(1000, 1000)
		if err != nil || !bytes.Equal(v.Data, data) {
			t.Fatalf("sync=%v: reading the second AppendAt back: %v", sync, err)
		}
		close(armed)
		_, err = cl.AppendAt(2000, data)
		if sync {
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("SyncAppendAt refused by the plugin: %v, want ErrCorrupt", err)
			}
			cl.Close()
			continue
		}
		if err != nil { // queued: accepted, refused later
			t.Fatalf("queued AppendAt: %v", err)
		}
		if err := cl.Flush(); !errors.Is(err, store.ErrCorrupt) { // drains, then reports
			t.Fatalf("Flush after a refused queued AppendAt: %v, want ErrCorrupt", err)
		}
		if _, err := cl.AppendAt(3000, data); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("AppendAt after a refused queued AppendAt: %v, want ErrCorrupt", err)
		}
		cl.Close()
	}
}

// TestPluginStoreFramedAppend: with FrameAppends the first Append to a
// queue asks the plugin; the next ones are framed by the host (answered
// before the plugin holds them, read back from the tail at once) and what
// the plugin stores is exactly what the host answered. A new queue, a
// record larger than any the plugin took, a segment's end or a Truncate
// send the next Append to the plugin again.
func TestPluginStoreFramedAppend(t *testing.T) {
	cl := openClient(t, openPlain, storeplugin.ClientConfig{FrameAppends: true})
	defer cl.Close()
	var res []store.AppendResult
	put := func(topic string, qid int32, body []byte) store.AppendResult {
		t.Helper()
		a, err := cl.Append(context.Background(), &record.Message{Topic: topic, QueueID: qid, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, a)
		return a
	}
	framed := func() uint64 { return cl.Stats().Framed }
	body := bytes.Repeat([]byte{'b'}, 100)

	put("T", 0, body)
	if n := framed(); n != 0 {
		t.Fatalf("first Append to a queue framed by the host (%d)", n)
	}
	for i := 1; i < 10; i++ {
		a := put("T", 0, body)
		if a.QueueOffset != int64(i) || a.Offset != res[i-1].NextOffset || cl.Bounds().Max != a.NextOffset {
			t.Fatalf("framed append %d: %+v after %+v, max %d", i, a, res[i-1], cl.Bounds().Max)
		}
		v, err := cl.Read(a.Offset, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if rec, err := record.Decode(v.Data); err != nil || rec.QueueOffset != int64(i) || rec.StoreTimestamp != a.StoreTimestamp {
			t.Fatalf("read of framed append %d: %+v %v", i, rec, err)
		}
	}
	if n := framed(); n != 9 {
		t.Fatalf("%d of 9 appends framed", n)
	}
	put("T", 1, body)                  // a new queue: the plugin
	put("T", 0, bytes.Repeat(body, 2)) // larger than any record the plugin took
	put("T", 1, body)                  // framed
	if n := framed(); n != 10 {
		t.Fatalf("framed %d, want 10 (new queue and larger record go to the plugin)", n)
	}

	// What the plugin stored is what the host answered.
	check := func() {
		t.Helper()
		recs, _, err := cl.ReadMessages(0, 1000)
		if err != nil || len(recs) != len(res) {
			t.Fatalf("read back %d of %d records: %v", len(recs), len(res), err)
		}
		for i, r := range recs {
			a := res[i]
			if r.PhysicalOffset != a.Offset || r.QueueOffset != a.QueueOffset || r.StoreTimestamp != a.StoreTimestamp || r.TotalSize != a.Size {
				t.Fatalf("record %d: stored %+v, answered %+v", i, r, a)
			}
		}
		if end, n, err := store.ScanRecords(cl, 0, cl.Bounds().Max); err != nil || n != len(res) || end != cl.Bounds().Max {
			t.Fatalf("scan: %d records to %d: %v", n, end, err)
		}
	}
	check()

	// A Truncate forgets the queues: the next Append asks the plugin.
	if err := cl.Truncate(res[12].Offset); err != nil {
		t.Fatal(err)
	}
	res = res[:12]
	before := framed()
	put("T", 0, body)
	if framed() != before {
		t.Fatal("an Append right after Truncate was framed by the host")
	}
	if a := put("T", 0, body); a.QueueOffset != 12 || framed() != before+1 {
		t.Fatalf("after truncate: %+v, framed %d", a, framed()-before)
	}
	check()

	// Up to a segment's end (1 MiB): the plugin writes the filler and the
	// first record of the next segment, the host frames on from there.
	big := bytes.Repeat([]byte{'x'}, 60<<10)
	put("T", 2, big)
	for cl.Bounds().Max < 1<<20 {
		put("T", 2, big)
	}
	if last := res[len(res)-1]; last.Offset != 1<<20 {
		t.Fatalf("the record crossing the segment end went to %d", last.Offset)
	}
	before = framed()
	put("T", 2, big)
	if framed() != before+1 {
		t.Fatal("no framing in the second segment")
	}
	recs, _, err := cl.ReadMessages(1<<20, 10)
	if err != nil || len(recs) != 2 || recs[1].QueueOffset != res[len(res)-1].QueueOffset {
		t.Fatalf("second segment: %d records, %v", len(recs), err)
	}
}

// TestPluginStoreFramedConcurrent: producers on several queues at once,
// framed and not; every queue's offsets run 0, 1, 2... in log order and
// the stored records are the answered ones.
func TestPluginStoreFramedConcurrent(t *testing.T) {
	cl := openClient(t, openPlain, storeplugin.ClientConfig{FrameAppends: true})
	defer cl.Close()
	var mu sync.Mutex
	answered := map[int64]store.AppendResult{}
	var wg sync.WaitGroup
	for p := range 8 {
		wg.Go(func() {
			for j := range 100 {
				a, err := cl.Append(context.Background(), &record.Message{Topic: "T", QueueID: int32(p % 3), Body: []byte(fmt.Sprint(p, "-", j))})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				answered[a.Offset] = a
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if cl.Stats().Framed == 0 {
		t.Fatal("no Append was framed")
	}
	recs, _, err := cl.ReadMessages(0, 1000)
	if err != nil || len(recs) != 800 {
		t.Fatalf("read back %d records: %v", len(recs), err)
	}
	next := map[int32]int64{}
	for _, r := range recs {
		a, ok := answered[r.PhysicalOffset]
		if !ok || r.QueueOffset != a.QueueOffset || r.StoreTimestamp != a.StoreTimestamp || r.TotalSize != a.Size {
			t.Fatalf("stored %+v, answered %+v (%v)", r, a, ok)
		}
		if r.QueueOffset != next[r.QueueID] {
			t.Fatalf("queue %d: offset %d, want %d", r.QueueID, r.QueueOffset, next[r.QueueID])
		}
		next[r.QueueID]++
	}
}

// TestPluginStoreFramedRefused: a framed record the plugin refuses makes
// every later call fail, as a refused queued AppendAt does.
func TestPluginStoreFramedRefused(t *testing.T) {
	armed := make(chan struct{})
	cl := openFailingClient(t, armed, storeplugin.ClientConfig{FrameAppends: true})
	defer cl.Close()
	msg := &record.Message{Topic: "T", Body: []byte("x")}
	for range 2 {
		if _, err := cl.Append(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
	}
	close(armed)
	if _, err := cl.Append(context.Background(), msg); err != nil { // framed: accepted, refused later
		t.Fatalf("framed Append: %v", err)
	}
	if err := cl.Flush(); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("Flush after a refused framed Append: %v, want ErrCorrupt", err)
	}
	if _, err := cl.Append(context.Background(), msg); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("Append after a refused framed Append: %v, want ErrCorrupt", err)
	}
}

// brokenReader gives n bytes of b, then fails.
type brokenReader struct {
	b   []byte
	n   int
	err error
}

func (r *brokenReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, r.err
	}
	k := copy(p, r.b[:min(r.n, len(r.b))])
	r.b, r.n = r.b[k:], r.n-k
	return k, nil
}

// TestPluginStoreAppendAtFrom: a slave's AppendAtFrom (store.AppenderFrom)
// stores what AppendAt of the same bytes stores: queued ones (read into the
// tail, sent from there, merged with their neighbours) and ones the host
// cannot check (the empty log, a wrong offset, a segment's end: read, then
// answered by the plugin). A reader that fails leaves nothing visible and
// the next call at the same offset succeeds.
func TestPluginStoreAppendAtFrom(t *testing.T) {
	for _, sync := range []bool{false, true} {
		master := openClient(t, openPlain, storeplugin.ClientConfig{})
		for i := range 300 {
			body := bytes.Repeat([]byte{byte(i)}, 100+37*i)
			if _, err := master.Append(context.Background(), &record.Message{Topic: "T", QueueID: int32(i % 3), Body: body}); err != nil {
				t.Fatal(err)
			}
		}
		max := master.Bounds().Max
		slave := openClient(t, openPlain, storeplugin.ClientConfig{SyncAppendAt: sync})
		var app store.AppenderFrom = slave
		failed := false
		for off := int64(0); off < max; {
			v, err := master.Read(off, 5000)
			if err != nil {
				t.Fatal(err)
			}
			n := len(v.Data)
			if !failed && off > 0 {
				failed = true
				broke := errors.New("connection reset")
				_, err := app.AppendAtFrom(off, n, &brokenReader{b: v.Data, n: n / 2, err: broke})
				if !errors.Is(err, broke) {
					t.Fatalf("sync=%v: AppendAtFrom from a failing reader: %v", sync, err)
				}
				if b := slave.Bounds(); b.Max != off {
					t.Fatalf("sync=%v: Max %d after a failed AppendAtFrom at %d", sync, b.Max, off)
				}
			}
			got, err := app.AppendAtFrom(off, n, bytes.NewReader(v.Data))
			if err != nil || got != off+int64(n) {
				t.Fatalf("sync=%v: AppendAtFrom at %d: %d %v", sync, off, got, err)
			}
			off += int64(n)
		}
		if _, err := app.AppendAtFrom(max+1, 10, bytes.NewReader(make([]byte, 10))); !errors.Is(err, store.ErrOffsetMismatch) {
			t.Fatalf("sync=%v: AppendAtFrom past the max offset: %v, want ErrOffsetMismatch", sync, err)
		}
		if err := slave.Flush(); err != nil {
			t.Fatal(err)
		}
		for off := int64(0); off < max; {
			want, err := master.Read(off, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			got, err := slave.Read(off, len(want.Data))
			if err != nil || len(got.Data) == 0 || !bytes.Equal(got.Data, want.Data[:len(got.Data)]) {
				t.Fatalf("sync=%v: slave bytes at %d differ from the master's: %v", sync, off, err)
			}
			off += int64(len(got.Data))
		}
		mrecs, _, err := master.ReadMessages(0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		srecs, _, err := slave.ReadMessages(0, 1000)
		if err != nil || len(srecs) != len(mrecs) || len(srecs) != 300 {
			t.Fatalf("sync=%v: the plugin holds %d records, want %d: %v", sync, len(srecs), len(mrecs), err)
		}
		for i := range srecs {
			if !bytes.Equal(srecs[i].Body, mrecs[i].Body) || srecs[i].QueueOffset != mrecs[i].QueueOffset {
				t.Fatalf("sync=%v: record %d differs", sync, i)
			}
		}
		if st := slave.Stats(); !sync && st.Ops >= uint64(len(srecs)) {
			t.Fatalf("sync=%v: stats %+v: queued AppendAtFrom were not merged into ops", sync, st)
		}
		slave.Close()
		master.Close()
	}
}
