package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/replicatorhq/replicator/client"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/sdk/proto/producerv1"
	"github.com/replicatorhq/replicator/sdk/record"
)

// TestStreamPutOrigin: with Config.PutOrigin a stored message's result
// carries the master epoch and the broker id, as the JSON answer does, and
// the client's Result shows them; without it both are 0.
func TestStreamPutOrigin(t *testing.T) {
	for _, origin := range []bool{true, false} {
		ss := startStreamServer(t, newFake(), func(c *Config) {
			if origin {
				c.PutOrigin = func(res core.PutResult) (int32, int64) { return 7, 3 }
			}
		})
		_, results, st, msg := rawStream(t, ss.addr, bytes.NewReader(batch(1)), nil)
		if st != "0" || len(results) != 1 || results[0].GetStorage() != producerv1.Storage_STORAGE_STORED {
			t.Fatalf("origin=%v: status %s %q, results %v", origin, st, msg, results)
		}
		r := results[0]
		if origin && (r.GetEpoch() != 7 || r.GetBrokerId() != 3) || !origin && (r.GetEpoch() != 0 || r.GetBrokerId() != 0) {
			t.Fatalf("origin=%v: result %v", origin, r)
		}
		p := dialStream(t, ss.addr)
		res, err := p.Send(context.Background(), &client.Message{Topic: "T", Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		if origin && (res.Epoch != 7 || res.BrokerID != 3) || !origin && (res.Epoch != 0 || res.BrokerID != 0) {
			t.Fatalf("origin=%v: client result %+v", origin, res)
		}
	}
}

// TestStreamNotMasterNamesMaster: the stream's NOT_MASTER answer (an
// autoswitch slave's error, a fenced master's) names the master's API, as
// the JSON 403 does; a RedirectError's master wins over Config.MasterAPI
// (read later, it may name none).
func TestStreamNotMasterNamesMaster(t *testing.T) {
	const cfgMaster, errMaster = "http://10.0.0.1:8080", "http://10.0.0.2:8080"
	var mode atomic.Value
	b := &funcBackend{fakeBackend: newFake(), put: func(ctx context.Context, msg *record.Message) (core.PutResult, error) {
		switch mode.Load() {
		case "autoswitch slave":
			return core.PutResult{}, fmt.Errorf("%w: %w", core.ErrNotMaster, core.ErrSlaveWriteProtected)
		case "fenced":
			return core.PutResult{}, fmt.Errorf("%w: lease expired", core.ErrFenced)
		case "redirect":
			return core.PutResult{}, &RedirectError{MasterAPI: errMaster, Err: fmt.Errorf("%w: %w", core.ErrNotMaster, core.ErrSlaveWriteProtected)}
		case "classic slave":
			return core.PutResult{}, core.ErrSlaveWriteProtected
		}
		return core.PutResult{}, fmt.Errorf("unexpected mode %v", mode.Load())
	}}
	var cfgAPI atomic.Value
	ss := startStreamServer(t, b, func(c *Config) { c.MasterAPI = func() string { return cfgAPI.Load().(string) } })
	for _, c := range []struct {
		mode, cfg string
		err       producerv1.Error
		want      string
	}{
		{"autoswitch slave", cfgMaster, producerv1.Error_ERROR_NOT_MASTER, cfgMaster},
		{"fenced", cfgMaster, producerv1.Error_ERROR_NOT_MASTER, cfgMaster},
		{"fenced", "", producerv1.Error_ERROR_NOT_MASTER, ""},
		{"redirect", "", producerv1.Error_ERROR_NOT_MASTER, errMaster},
		{"classic slave", cfgMaster, producerv1.Error_ERROR_SLAVE_WRITE_PROTECTED, cfgMaster},
	} {
		mode.Store(c.mode)
		cfgAPI.Store(c.cfg)
		_, results, st, msg := rawStream(t, ss.addr, bytes.NewReader(batch(1)), nil)
		if st != "0" || len(results) != 1 {
			t.Fatalf("%s: status %s %q, results %v", c.mode, st, msg, results)
		}
		r := results[0]
		if r.GetStorage() != producerv1.Storage_STORAGE_NOT_STORED || r.GetError() != c.err || r.GetMasterApi() != c.want {
			t.Fatalf("%s (Config.MasterAPI %q): result %v, want %v naming %q", c.mode, c.cfg, r, c.err, c.want)
		}
	}

	// The JSON 403 takes the RedirectError's master too.
	s, err := New(Config{Backend: b, MasterAPI: func() string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	mode.Store("redirect")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/topics/T/messages", strings.NewReader("b")))
	var ea ErrorAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &ea); err != nil || rec.Code != http.StatusForbidden ||
		ea.MasterAPI != errMaster || rec.Header().Get("Location") != errMaster+"/v1/topics/T/messages" {
		t.Fatalf("JSON put: %d %s Location %q", rec.Code, rec.Body, rec.Header().Get("Location"))
	}
}

// TestStreamFollowsNotMaster: a producer that knows only a node answering
// NOT_MASTER (an autoswitch slave) stores on the master that node names.
func TestStreamFollowsNotMaster(t *testing.T) {
	master := startStreamServer(t, newFake(), nil)
	slave := startStreamServer(t, &funcBackend{fakeBackend: newFake(), put: func(context.Context, *record.Message) (core.PutResult, error) {
		return core.PutResult{}, fmt.Errorf("%w: %w", core.ErrNotMaster, core.ErrSlaveWriteProtected)
	}}, func(c *Config) { c.MasterAPI = func() string { return "http://" + master.addr } })
	p := dialStream(t, slave.addr)
	res, err := p.Send(context.Background(), &client.Message{Topic: "T", Body: []byte("x")})
	if err != nil || res.Node != master.addr {
		t.Fatalf("result %+v, error %v: want stored on %s", res, err, master.addr)
	}
}

// TestStreamNoMaster: a put refused for want of a master (ErrNoMaster,
// controller mode during an election) is ERROR_UNAVAILABLE, not stored,
// saying why (not ERROR_INTERNAL "may be stored"); the client sends it
// again until a master takes it.
func TestStreamNoMaster(t *testing.T) {
	var refuse atomic.Int32
	refuse.Store(1 << 20)
	fb := newFake()
	b := &funcBackend{fakeBackend: fb, put: func(ctx context.Context, msg *record.Message) (core.PutResult, error) {
		if refuse.Add(-1) >= 0 {
			return core.PutResult{}, fmt.Errorf("%w: group g has no master (election under way): %w", ErrNoMaster, core.ErrNotMaster)
		}
		return fb.Put(ctx, msg)
	}}
	ss := startStreamServer(t, b, func(c *Config) { c.MasterAPI = func() string { return "" } })
	_, results, st, msg := rawStream(t, ss.addr, bytes.NewReader(batch(1)), nil)
	if st != "0" || len(results) != 1 {
		t.Fatalf("status %s %q, results %v", st, msg, results)
	}
	r := results[0]
	if r.GetStorage() != producerv1.Storage_STORAGE_NOT_STORED || r.GetError() != producerv1.Error_ERROR_UNAVAILABLE ||
		!strings.Contains(r.GetMessage(), "group g has no master (election under way)") || !strings.Contains(r.GetMessage(), "not stored") {
		t.Fatalf("result %v", r)
	}
	if got := testutil.ToFloat64(ss.api.stream.met.messages.WithLabelValues("no_master")); got != 1 {
		t.Fatalf("messages_total{no_master} = %v", got)
	}

	// The client retries (pausing once the only address refused) and
	// stores the message once a master takes it.
	refuse.Store(3)
	p := dialStream(t, ss.addr, client.WithRetryTimeout(10*time.Second))
	res, err := p.Send(context.Background(), &client.Message{Topic: "T", Body: []byte("after the election")})
	if err != nil || res.Status != client.PutOK {
		t.Fatalf("result %+v, error %v", res, err)
	}
	if refuse.Load() >= 0 || fb.count() != 1 {
		t.Fatalf("refusals left %d, records %d", refuse.Load(), fb.count())
	}
	// Without following, the error says not stored, no master.
	refuse.Store(1 << 20)
	p2 := dialStream(t, ss.addr, client.WithFollowMaster(false))
	_, err = p2.Send(context.Background(), &client.Message{Topic: "T", Body: []byte("x")})
	if !errors.Is(err, client.ErrNoMaster) || !errors.Is(err, client.ErrNotStored) || !strings.Contains(err.Error(), "election under way") {
		t.Fatalf("without following: %v", err)
	}
}
