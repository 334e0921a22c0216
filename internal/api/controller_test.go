package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/sdk/record"
)

// TestPutOrigin: with Config.PutOrigin a stored put's answer names the
// master epoch and the broker id; without it both are left out.
func TestPutOrigin(t *testing.T) {
	for _, origin := range []bool{true, false} {
		cfg := Config{Backend: newFake()}
		if origin {
			cfg.PutOrigin = func(res core.PutResult) (int32, int64) { return 7, 3 }
		}
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/topics/T/messages", strings.NewReader("body")))
		var a PutAnswer
		if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil || rec.Code != http.StatusOK {
			t.Fatalf("origin=%v: %d %s", origin, rec.Code, rec.Body)
		}
		if origin && (a.Epoch != 7 || a.BrokerID != 3) {
			t.Fatalf("answer %+v, want epoch 7 and broker 3", a)
		}
		if !origin && strings.Contains(rec.Body.String(), "epoch") {
			t.Fatalf("answer without PutOrigin: %s", rec.Body)
		}
	}
}

// TestSlavePutLocation: a slave's 403 names its master in the body and
// in a Location header that keeps the request's path and query; without
// a known master there is neither.
func TestSlavePutLocation(t *testing.T) {
	for _, master := range []string{"http://10.0.0.1:8080", ""} {
		b := newFake()
		b.slave = true
		s, err := New(Config{Backend: b, MasterAPI: func() string { return master }})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/topics/T/messages?queue=2&tags=x", strings.NewReader("b")))
		var ea ErrorAnswer
		if err := json.Unmarshal(rec.Body.Bytes(), &ea); err != nil || rec.Code != http.StatusForbidden {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		want := ""
		if master != "" {
			want = master + "/v1/topics/T/messages?queue=2&tags=x"
		}
		if ea.MasterAPI != master || rec.Header().Get("Location") != want {
			t.Fatalf("master %q: body %+v, Location %q", master, ea, rec.Header().Get("Location"))
		}
	}
}

// errBackend fails every put with err after storing the message when
// stored is set.
type errBackend struct {
	*fakeBackend
	err    error
	stored bool
}

// PutBatch puts the messages one after the other (Put does not wait).
func (e *errBackend) PutBatch(ctx context.Context, msgs []*record.Message) []core.BatchPut {
	return putInTurn(ctx, e.Put, msgs)
}

func (e *errBackend) Put(ctx context.Context, msg *record.Message) (core.PutResult, error) {
	if !e.stored {
		return core.PutResult{}, e.err
	}
	res, err := e.fakeBackend.Put(ctx, msg)
	if err != nil {
		return res, err
	}
	return res, e.err
}

// TestPutRefusedNoMaster: a fenced master and a node without a master
// answer 503 with why, and "stored" says whether the message may be
// stored.
func TestPutRefusedNoMaster(t *testing.T) {
	for _, c := range []struct {
		name   string
		err    error
		stored bool
		want   string
		text   string
	}{
		{"lease expired before", fmt.Errorf("%w: registration lease not valid", core.ErrFenced), false, StoredNo, "registration lease not valid"},
		{"lease expired during", fmt.Errorf("%w: the deadline passed", core.ErrFenced), true, StoredMaybe, "the deadline passed"},
		{"no master", fmt.Errorf("%w: group g has no master (no eligible node): %w", ErrNoMaster, core.ErrNotMaster), false, StoredNo, "group g has no master"},
	} {
		s, err := New(Config{Backend: &errBackend{fakeBackend: newFake(), err: c.err, stored: c.stored}})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/topics/T/messages", strings.NewReader("b")))
		var ea ErrorAnswer
		if err := json.Unmarshal(rec.Body.Bytes(), &ea); err != nil || rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s: %d %s", c.name, rec.Code, rec.Body)
		}
		if ea.Stored != c.want || !strings.Contains(ea.Error, c.text) {
			t.Fatalf("%s: %+v, want stored %q and %q", c.name, ea, c.want, c.text)
		}
	}
	if !errors.Is(fmt.Errorf("x: %w", ErrNoMaster), ErrNoMaster) {
		t.Fatal("ErrNoMaster does not wrap")
	}
}
