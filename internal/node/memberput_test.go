package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/replicatorhq/replicator/controller"
	"github.com/replicatorhq/replicator/controller/member"
	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/internal/api"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// refusingBackend is an api.Backend whose every put fails with err.
type refusingBackend struct{ err error }

// PutBatch refuses every message with err.
func (b refusingBackend) PutBatch(_ context.Context, msgs []*record.Message) []core.BatchPut {
	out := make([]core.BatchPut, len(msgs))
	for i := range out {
		out[i].Err = b.err
	}
	return out
}

func (b refusingBackend) Put(context.Context, *record.Message) (core.PutResult, error) {
	return core.PutResult{}, b.err
}
func (refusingBackend) ReadMessages(int64, int) ([]record.Record, int64, error) { return nil, 0, nil }
func (refusingBackend) Bounds() store.Bounds                                    { return store.Bounds{} }
func (refusingBackend) Watch(chan<- struct{}) func()                            { return func() {} }
func (refusingBackend) Status() api.Status                                      { return api.Status{} }

// TestNotMasterPutAnswers: a put a controller-mode member refuses as not
// the master answers, for each reading of its group: 403 naming the
// master it read (not the one a later MasterAPI call finds: here none, as
// during an election) when it is a slave of a known master; 503 with why
// and "stored":"no" when the group has no master, when this node was
// elected and is not master yet, when it has no role yet, or when the
// master's API address is unknown. Never a 403 without master_api.
func TestNotMasterPutAnswers(t *testing.T) {
	slaveErr := fmt.Errorf("%w: %w", core.ErrNotMaster, core.ErrSlaveWriteProtected)
	base := member.Status{Group: "g", BrokerID: 2, Master: 1, MasterEpoch: 4, MasterAPI: "http://10.0.0.1:8080"}
	for _, c := range []struct {
		name string
		mod  func(*member.Status)
		err  error
		code int
		text string
	}{
		{"slave of a known master", func(*member.Status) {}, slaveErr, http.StatusForbidden, "this node is a slave"},
		{"no master", func(s *member.Status) {
			s.Master, s.MasterAPI, s.NoMasterReason = controller.NoMaster, "", "no eligible node"
		}, slaveErr,
			http.StatusServiceUnavailable, "group g has no master (no eligible node)"},
		{"no master, no reason", func(s *member.Status) { s.Master, s.MasterAPI = controller.NoMaster, "" }, slaveErr,
			http.StatusServiceUnavailable, "none elected yet"},
		{"elected, not master yet", func(s *member.Status) { s.Master, s.MasterAPI = 2, "http://10.0.0.2:8080" }, slaveErr,
			http.StatusServiceUnavailable, "this node (broker 2) was elected the master of group g (epoch 4) and is taking the role"},
		{"no role yet", func(*member.Status) {}, core.ErrNotMaster, http.StatusServiceUnavailable, "this node has no role yet"},
		{"master API unknown", func(s *member.Status) { s.MasterAPI = "" }, slaveErr, http.StatusServiceUnavailable, "its API address is unknown"},
	} {
		st := base
		c.mod(&st)
		s, err := api.New(api.Config{Backend: refusingBackend{notMasterPutErr(st, c.err)}, MasterAPI: func() string { return "" }})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/topics/T/messages?queue=1", strings.NewReader("m")))
		var ea api.ErrorAnswer
		if err := json.Unmarshal(rec.Body.Bytes(), &ea); err != nil || rec.Code != c.code || !strings.Contains(ea.Error, c.text) {
			t.Fatalf("%s: %d %s, want %d saying %q", c.name, rec.Code, rec.Body, c.code, c.text)
		}
		switch c.code {
		case http.StatusForbidden:
			if ea.MasterAPI != base.MasterAPI || rec.Header().Get("Location") != base.MasterAPI+"/v1/topics/T/messages?queue=1" {
				t.Fatalf("%s: %+v, Location %q", c.name, ea, rec.Header().Get("Location"))
			}
		default:
			if ea.Stored != api.StoredNo || ea.MasterAPI != "" {
				t.Fatalf("%s: %+v, want stored no and no master_api", c.name, ea)
			}
		}
	}
}
