package metadata_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/replicatorhq/replicator/plugins/metadata"
	"github.com/replicatorhq/replicator/remoting"
	"github.com/replicatorhq/replicator/sdk/meta"
)

// serveRemoting serves h on a real loopback port for the test's life.
func serveRemoting(t *testing.T, h remoting.Handler) string {
	t.Helper()
	srv, err := remoting.NewServer(remoting.ServerConfig{Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(ln); close(done) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().String()
}

func openStore(t *testing.T, defaults bool) *metadata.Store {
	t.Helper()
	st, err := metadata.Open(filepath.Join(t.TempDir(), "config"), metadata.Options{CreateDefaults: defaults})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func call(t *testing.T, addr string, req *remoting.Command) *remoting.Command {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cl := remoting.NewClient(c, 0)
	defer cl.Close()
	resp, err := cl.Invoke(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestRemotingHandlerAnswers: each code answers its document as the file
// holds it; an absent document its empty body; other codes
// REQUEST_CODE_NOT_SUPPORTED with RocketMQ's remark; in both serialisations.
func TestRemotingHandlerAnswers(t *testing.T) {
	st := openStore(t, true)
	ctx := context.Background()
	topics, err := st.Put(ctx, metadata.TopicsName, json.RawMessage(`{"topicConfigTable":{"T1":{"topicName":"T1","readQueueNums":4,"writeQueueNums":4,"perm":6}}}`))
	if err != nil {
		t.Fatal(err)
	}
	addr := serveRemoting(t, metadata.NewRemotingHandler(st, nil))
	for _, ser := range []remoting.SerializeType{remoting.JSON, remoting.ROCKETMQ} {
		resp := call(t, addr, &remoting.Command{Code: remoting.GetAllTopicConfig, Serialize: ser})
		file, err := os.ReadFile(filepath.Join(st.Dir(), metadata.TopicsName))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Code != remoting.Success || string(resp.Body) != string(file) || resp.Serialize != ser {
			t.Fatalf("%v: GET_ALL_TOPIC_CONFIG answered %d %q, want SUCCESS and the file %q", ser, resp.Code, resp.Body, file)
		}
		v, _, err := metadata.DecodeDocument(resp.Body)
		if err != nil || v != topics.Version {
			t.Fatalf("version %+v (%v), want %+v", v, err, topics.Version)
		}
		resp = call(t, addr, &remoting.Command{Code: remoting.GetAllMessageRequestMode, Serialize: ser})
		if resp.Code != remoting.Success || string(resp.Body) != `{"dataVersion":{"stateVersion":0,"timestamp":0,"counter":0},"messageRequestModeMap":{}}` {
			t.Fatalf("request modes: %d %q", resp.Code, resp.Body)
		}
		resp = call(t, addr, &remoting.Command{Code: remoting.GetTimerMetrics, Serialize: ser})
		if resp.Code != remoting.Success || string(resp.Body) != `{"dataVersion":{"stateVersion":0,"timestamp":0,"counter":0},"timingCount":{}}` {
			t.Fatalf("timer metrics: %d %q", resp.Code, resp.Body)
		}
		resp = call(t, addr, &remoting.Command{Code: 103, Serialize: ser}) // REGISTER_BROKER
		if resp.Code != remoting.RequestCodeNotSupported || resp.Remark != " request type 103 not supported" {
			t.Fatalf("unsupported code: %+v", resp)
		}
	}
	for _, code := range []int32{remoting.GetAllConsumerOffset, remoting.GetAllDelayOffset, remoting.GetAllSubscriptionGroupConfig} {
		resp := call(t, addr, &remoting.Command{Code: code})
		if resp.Code != remoting.Success || !strings.HasPrefix(string(resp.Body), `{"dataVersion":{`) {
			t.Fatalf("code %d: %d %q", code, resp.Code, resp.Body)
		}
	}
}

type failingSource struct{ meta.Source }

func (failingSource) Get(context.Context, string) (meta.Document, error) {
	return meta.Document{}, errors.New("disk on fire")
}

func TestRemotingHandlerStoreError(t *testing.T) {
	addr := serveRemoting(t, metadata.NewRemotingHandler(failingSource{}, nil))
	resp := call(t, addr, &remoting.Command{Code: remoting.GetAllTopicConfig})
	if resp.Code != remoting.SystemError || !strings.Contains(resp.Remark, "disk on fire") {
		t.Fatalf("%+v", resp)
	}
}

// countingLocal counts the documents a Syncer writes.
type countingLocal struct {
	metadata.LocalStore
	written atomic.Int64
}

func (c *countingLocal) Apply(ctx context.Context, docs []meta.Document) error {
	c.written.Add(int64(len(docs)))
	return c.LocalStore.Apply(ctx, docs)
}

func newRemotingSyncer(t *testing.T, addr string, local metadata.LocalStore) *metadata.Syncer {
	t.Helper()
	src, err := metadata.NewRemotingSource(metadata.RemotingSourceConfig{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	s, err := metadata.NewSyncer(metadata.SyncerConfig{Master: src, Local: metadata.TakeEveryRound(local, metadata.UnversionedNames()...)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustGet(t *testing.T, st meta.Source, name string) meta.Document {
	t.Helper()
	d, err := st.Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRemotingMasterToSlave: replicator master (Store + remoting server on
// real TCP) to replicator slave (Syncer over RemotingSource into a Store),
// with SlaveSynchronize's rules: topics and subscription groups replaced
// when their DataVersion differs (a slave-only topic disappears), consumer
// offsets merged every round (a slave-only key stays), the master's
// DataVersion adopted; an unchanged master writes nothing.
func TestRemotingMasterToSlave(t *testing.T) {
	ctx := context.Background()
	master := openStore(t, true)
	slaveStore := openStore(t, false)
	if err := slaveStore.Apply(ctx, []meta.Document{
		{Name: metadata.TopicsName, Version: meta.DataVersion{Counter: 99}, Body: json.RawMessage(`{"topicConfigTable":{"SlaveOnly":{"topicName":"SlaveOnly"}}}`)},
		{Name: metadata.ConsumerOffsetName, Body: json.RawMessage(`{"offsetTable":{"S@G":{"0":5}}}`)},
	}); err != nil {
		t.Fatal(err)
	}
	slave := &countingLocal{LocalStore: slaveStore}
	addr := serveRemoting(t, metadata.NewRemotingHandler(master, nil))
	s := newRemotingSyncer(t, addr, slave)

	topics, err := master.Put(ctx, metadata.TopicsName, json.RawMessage(`{"topicConfigTable":{"TopicA":{"topicName":"TopicA","readQueueNums":8,"writeQueueNums":8,"perm":6}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := master.Put(ctx, metadata.ConsumerOffsetName, json.RawMessage(`{"offsetTable":{"TopicA@G1":{"0":10,"1":11}}}`)); err != nil {
		t.Fatal(err)
	}
	if res := s.SyncOnce(ctx); res.Err != nil {
		t.Fatal(res.Err)
	}
	got := mustGet(t, slaveStore, metadata.TopicsName)
	if got.Version != topics.Version || string(got.Body) != string(topics.Body) {
		t.Fatalf("slave topics %+v %s, want %+v %s", got.Version, got.Body, topics.Version, topics.Body)
	}
	var offsets struct {
		OffsetTable map[string]map[string]int64 `json:"offsetTable"`
	}
	if err := json.Unmarshal(mustGet(t, slaveStore, metadata.ConsumerOffsetName).Body, &offsets); err != nil {
		t.Fatal(err)
	}
	if offsets.OffsetTable["TopicA@G1"]["1"] != 11 || offsets.OffsetTable["S@G"]["0"] != 5 {
		t.Fatalf("merged offsets %v", offsets.OffsetTable)
	}
	for _, name := range []string{metadata.SubscriptionGroupName, metadata.DelayOffsetName, metadata.MessageRequestModeName, metadata.TimerMetricsName} {
		mustGet(t, slaveStore, name)
	}

	// Nothing changed: nothing written.
	before := slave.written.Load()
	if res := s.SyncOnce(ctx); res.Err != nil {
		t.Fatal(res.Err)
	}
	if n := slave.written.Load() - before; n != 0 {
		t.Fatalf("an unchanged master wrote %d documents", n)
	}

	// A new topic on the master appears on the slave.
	if _, err := master.Put(ctx, metadata.TopicsName, json.RawMessage(`{"topicConfigTable":{"TopicA":{"topicName":"TopicA"},"TopicB":{"topicName":"TopicB"}}}`)); err != nil {
		t.Fatal(err)
	}
	before = slave.written.Load()
	if res := s.SyncOnce(ctx); res.Err != nil || !slices.Contains(res.Applied, metadata.TopicsName) || len(res.Deleted) != 0 {
		t.Fatalf("round after a new topic: %+v", res)
	}
	if n := slave.written.Load() - before; n != 1 {
		t.Fatalf("a new topic wrote %d documents, want 1 (topics.json)", n)
	}
	if !strings.Contains(string(mustGet(t, slaveStore, metadata.TopicsName).Body), `"TopicB"`) {
		t.Fatal("TopicB did not reach the slave")
	}
}

// fastjsonMaster answers as a RocketMQ 4.x broker: fastjson bodies with
// unquoted integer keys, consumer offsets without a dataVersion, and
// REQUEST_CODE_NOT_SUPPORTED for GET_ALL_MESSAGE_REQUEST_MODE (402 is 5.x).
type fastjsonMaster struct{ offset atomic.Int64 }

func (m *fastjsonMaster) ServeRemoting(_ context.Context, req *remoting.Command) *remoting.Command {
	r := remoting.NewResponse(req, remoting.Success, "")
	switch req.Code {
	case remoting.GetAllTopicConfig:
		r.Body = []byte(`{"dataVersion":{"counter":7,"stateVersion":0,"timestamp":1764576000000},"topicConfigTable":{"TopicA":{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"TopicA","topicSysFlag":0,"writeQueueNums":4}},"mappingDataVersion":{"counter":0,"stateVersion":0,"timestamp":1},"topicQueueMappingDetailMap":{}}`)
	case remoting.GetAllConsumerOffset:
		r.Body = []byte(`{"offsetTable":{"TopicA@G":{0:` + itoa(m.offset.Load()) + `,1:3}}}`)
	case remoting.GetAllDelayOffset:
		r.Body = []byte(`{"offsetTable":{1:0,2:17}}`)
	case remoting.GetAllSubscriptionGroupConfig:
		r.Body = []byte(`{"dataVersion":{"counter":2,"stateVersion":0,"timestamp":1764576000001},"subscriptionGroupTable":{"G":{"groupName":"G","consumeEnable":true,"retryMaxTimes":16}}}`)
	default:
		return remoting.NewResponse(req, remoting.RequestCodeNotSupported, remoting.NotSupportedRemark(req.Code))
	}
	return r
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestRemotingSlaveOfFastjsonMaster: a replicator slave of a 4.x-style
// master: unquoted keys parsed, the mapping members dropped from topics,
// 402 and 61 unsupported tolerated, and consumer offsets that change without a
// DataVersion still taken every round.
func TestRemotingSlaveOfFastjsonMaster(t *testing.T) {
	ctx := context.Background()
	m := &fastjsonMaster{}
	m.offset.Store(10)
	addr := serveRemoting(t, m)
	slave := openStore(t, false)
	s := newRemotingSyncer(t, addr, slave)
	if res := s.SyncOnce(ctx); res.Err != nil {
		t.Fatal(res.Err)
	}
	topics := mustGet(t, slave, metadata.TopicsName)
	if topics.Version != (meta.DataVersion{Counter: 7, Timestamp: 1764576000000}) || strings.Contains(string(topics.Body), "mapping") {
		t.Fatalf("topics %+v %s", topics.Version, topics.Body)
	}
	for _, name := range []string{metadata.MessageRequestModeName, metadata.TimerMetricsName} {
		if _, err := slave.Get(ctx, name); !errors.Is(err, meta.ErrNotFound) {
			t.Fatalf("%s from a 4.x master: %v", name, err)
		}
	}
	if got := string(mustGet(t, slave, metadata.DelayOffsetName).Body); got != `{"offsetTable":{"1":0,"2":17}}` {
		t.Fatalf("delay offsets %s", got)
	}
	m.offset.Store(42) // no DataVersion: only the content changes
	if res := s.SyncOnce(ctx); res.Err != nil {
		t.Fatal(res.Err)
	}
	if got := string(mustGet(t, slave, metadata.ConsumerOffsetName).Body); !strings.Contains(got, `"0":42`) {
		t.Fatalf("consumer offsets after the master's commit: %s", got)
	}
}

// TestRemotingSourceFailures: an unsuccessful or malformed answer fails the
// round with ErrBadResponse and changes nothing.
func TestRemotingSourceFailures(t *testing.T) {
	for name, h := range map[string]remoting.HandlerFunc{
		"system error": func(_ context.Context, req *remoting.Command) *remoting.Command {
			return remoting.NewResponse(req, remoting.SystemError, "No topic in this broker")
		},
		"not JSON": func(_ context.Context, req *remoting.Command) *remoting.Command {
			r := remoting.NewResponse(req, remoting.Success, "")
			r.Body = []byte(`{"topicConfigTable":`)
			return r
		},
		"no body": func(_ context.Context, req *remoting.Command) *remoting.Command {
			return remoting.NewResponse(req, remoting.Success, "")
		},
		"topics unsupported": func(_ context.Context, req *remoting.Command) *remoting.Command {
			return remoting.NewResponse(req, remoting.RequestCodeNotSupported, remoting.NotSupportedRemark(req.Code))
		},
	} {
		t.Run(name, func(t *testing.T) {
			addr := serveRemoting(t, h)
			src, err := metadata.NewRemotingSource(metadata.RemotingSourceConfig{Addr: addr, Serialize: remoting.ROCKETMQ})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := src.List(context.Background()); !errors.Is(err, metadata.ErrBadResponse) {
				t.Fatalf("List: %v, want ErrBadResponse", err)
			}
			if _, err := src.Get(context.Background(), metadata.TopicsName); !errors.Is(err, meta.ErrNotFound) {
				t.Fatalf("Get after a failed List: %v", err)
			}
		})
	}
	// An answer over the frame bound fails before it is read.
	addr := serveRemoting(t, remoting.HandlerFunc(func(_ context.Context, req *remoting.Command) *remoting.Command {
		r := remoting.NewResponse(req, remoting.Success, "")
		r.Body = []byte(`{"topicConfigTable":{"x":"` + strings.Repeat("y", 4096) + `"}}`)
		return r
	}))
	small, err := metadata.NewRemotingSource(metadata.RemotingSourceConfig{Addr: addr, MaxFrameSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := small.List(context.Background()); !errors.Is(err, remoting.ErrFrameTooLarge) {
		t.Fatalf("List of an oversized answer: %v, want ErrFrameTooLarge", err)
	}
	// Nobody listening: a connection error, not ErrBadResponse.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr = ln.Addr().String()
	ln.Close()
	src, _ := metadata.NewRemotingSource(metadata.RemotingSourceConfig{Addr: addr})
	if _, err := src.List(context.Background()); err == nil || errors.Is(err, metadata.ErrBadResponse) {
		t.Fatalf("List with no master: %v", err)
	}
	if _, err := metadata.NewRemotingSource(metadata.RemotingSourceConfig{Addr: "nohostport"}); err == nil {
		t.Fatal("bad address accepted")
	}
}

// BenchmarkRemotingRound measures one SlaveSynchronize round over loopback
// TCP (connect, six requests, decode) against a master with 2000 topics
// and 2000 consumer-offset keys, in both header serialisations. MB/s counts
// the topic document.
func BenchmarkRemotingRound(b *testing.B) {
	ctx := context.Background()
	st, err := metadata.Open(filepath.Join(b.TempDir(), "config"), metadata.Options{CreateDefaults: true})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	var topics, offsets strings.Builder
	topics.WriteString(`{"topicConfigTable":{`)
	offsets.WriteString(`{"offsetTable":{`)
	for i := range 2000 {
		if i > 0 {
			topics.WriteByte(',')
			offsets.WriteByte(',')
		}
		fmt.Fprintf(&topics, `"Topic%d":{"topicName":"Topic%d","readQueueNums":8,"writeQueueNums":8,"perm":6,"order":false}`, i, i)
		fmt.Fprintf(&offsets, `"Topic%d@Group":{"0":%d,"1":%d,"2":%d,"3":%d}`, i, i, i+1, i+2, i+3)
	}
	topics.WriteString(`}}`)
	offsets.WriteString(`}}`)
	if _, err := st.Put(ctx, metadata.TopicsName, json.RawMessage(topics.String())); err != nil {
		b.Fatal(err)
	}
	if _, err := st.Put(ctx, metadata.ConsumerOffsetName, json.RawMessage(offsets.String())); err != nil {
		b.Fatal(err)
	}
	srv, err := remoting.NewServer(remoting.ServerConfig{Handler: metadata.NewRemotingHandler(st, nil)})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(ln); close(done) }()
	defer func() { srv.Close(); <-done }()
	for _, ser := range []remoting.SerializeType{remoting.JSON, remoting.ROCKETMQ} {
		src, err := metadata.NewRemotingSource(metadata.RemotingSourceConfig{Addr: ln.Addr().String(), Serialize: ser})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(ser.String(), func(b *testing.B) {
			var bytes int64
			for b.Loop() {
				es, err := src.List(ctx)
				if err != nil || len(es) != len(metadata.RemotingDocuments) {
					b.Fatalf("%d entries, %v", len(es), err)
				}
				d, _ := src.Get(ctx, metadata.TopicsName)
				bytes = int64(len(d.Body))
			}
			b.SetBytes(bytes)
		})
	}
}
