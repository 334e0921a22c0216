package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/sdk/record"
)

// fakeRoles records role requests and answers with err.
type fakeRoles struct {
	mu   sync.Mutex
	reqs []RoleRequest
	err  error
	b    *fakeBackend
}

func (f *fakeRoles) ChangeRole(ctx context.Context, req RoleRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, req)
	if f.err == nil && f.b != nil {
		f.b.mu.Lock()
		f.b.slave = req.Role == RoleSlave
		f.b.mu.Unlock()
	}
	return f.err
}

func (f *fakeRoles) calls() []RoleRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]RoleRequest(nil), f.reqs...)
}

func roleServer(t *testing.T, roles RoleChanger, token string) (*Server, *fakeBackend) {
	t.Helper()
	b := newFake()
	cfg := Config{Backend: b, Token: token}
	if roles != nil {
		cfg.Roles = roles
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, b
}

func postRole(s *Server, body, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/v1/role", strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec
}

func errorOf(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("answer %d is not JSON (%q): %s", rec.Code, ct, rec.Body)
	}
	var ea ErrorAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &ea); err != nil || ea.Error == "" {
		t.Fatalf("answer %d is not an error object: %s", rec.Code, rec.Body)
	}
	return ea.Error
}

// TestRoleBadInput: every malformed body answers 400 with a JSON message
// naming the problem, and never reaches the RoleChanger.
func TestRoleBadInput(t *testing.T) {
	roles := &fakeRoles{}
	s, _ := roleServer(t, roles, "")
	for _, c := range []struct{ body, want string }{
		{``, "invalid JSON"},
		{`not json`, "invalid JSON"},
		{`[]`, "invalid JSON"},
		{`{}`, `missing "role"`},
		{`{"role":"leader"}`, `invalid role "leader"`},
		{`{"role":"MASTER"}`, `invalid role`},
		{`{"role":"master","extra":1}`, `unknown field`},
		{`{"role":"master"} {"role":"slave"}`, "more than one value"},
		{`{"role":"master"} x`, "more than one value"},
		{`{"role":"master","master":"127.0.0.1:1"}`, `"master" is only for`},
		{`{"role":"master","epoch":-1}`, "invalid epoch -1"},
		{`{"role":"master","epoch":"2"}`, "invalid JSON"},
		{`{"role":"slave"}`, `needs "master"`},
		{`{"role":"slave","master":"nohost"}`, "invalid master address"},
		{`{"role":"slave","master":":10912"}`, "no host"},
		{`{"role":"slave","master":"h:0"}`, "port"},
		{`{"role":"slave","master":"h:65536"}`, "port"},
		{`{"role":"slave","master":"h:x"}`, "port"},
		{`{"role":"slave","master":"h:1","epoch":3}`, `"epoch" is only for`},
		{`{"role":"master","master_api":"http://127.0.0.1:1"}`, `"master_api" is only for`},
		{`{"role":"slave","master":"h:1","master_api":"ftp://h:2"}`, `"master_api": invalid URL`},
		{`{"role":"slave","master":"h:1","master_api":"http://h:2/?x=1"}`, `"master_api": invalid URL`},
		{`{"role":"slave","master":"h:1","master_api":"http://:2"}`, `"master_api": invalid URL`},
	} {
		rec := postRole(s, c.body, "")
		if rec.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", c.body, rec.Code, rec.Body)
			continue
		}
		if msg := errorOf(t, rec); !strings.Contains(msg, c.want) {
			t.Errorf("%s: message %q does not say %q", c.body, msg, c.want)
		}
	}
	req := httptest.NewRequest(http.MethodPost, "/v1/role?x=1", strings.NewReader(`{"role":"master"}`))
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest {
		t.Errorf("query parameter: %d", rec.Code)
	}
	rec = postRole(s, `{"role":"slave","master":"`+strings.Repeat("a", MaxRoleBody)+`:1"}`, "")
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: %d %s", rec.Code, rec.Body)
	}
	if n := len(roles.calls()); n != 0 {
		t.Fatalf("%d bad requests reached the role changer", n)
	}
	// GET is not a role change.
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/role", nil))
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != http.MethodPost {
		t.Fatalf("GET /v1/role: %d Allow=%q", rec.Code, rec.Header().Get("Allow"))
	}
	errorOf(t, rec)
}

// TestRoleMasterAPI: a demote's "master_api" reaches the role changer
// normalised like the slave's --master-api (scheme added, trailing slash
// cut).
func TestRoleMasterAPI(t *testing.T) {
	roles := &fakeRoles{}
	s, _ := roleServer(t, roles, "")
	for body, want := range map[string]string{
		`{"role":"slave","master":"h:1","master_api":"127.0.0.1:10911"}`:        "http://127.0.0.1:10911",
		`{"role":"slave","master":"h:1","master_api":"https://h.example:443/"}`: "https://h.example:443",
		`{"role":"slave","master":"h:1"}`:                                       "",
	} {
		before := len(roles.calls())
		if rec := postRole(s, body, ""); rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", body, rec.Code, rec.Body)
		}
		calls := roles.calls()
		if len(calls) != before+1 || calls[len(calls)-1].MasterAPI != want {
			t.Fatalf("%s: role changer got %+v, want master_api %q", body, calls[len(calls)-1:], want)
		}
	}
}

// TestRoleToken: with a token, a request without it or with another
// answers 401 and changes nothing; with it, the change is made.
func TestRoleToken(t *testing.T) {
	roles := &fakeRoles{}
	s, _ := roleServer(t, roles, "s3cret")
	for _, tok := range []string{"", "wrong"} {
		rec := postRole(s, `{"role":"master"}`, tok)
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("token %q: %d %s", tok, rec.Code, rec.Body)
		}
		errorOf(t, rec)
	}
	if n := len(roles.calls()); n != 0 {
		t.Fatalf("unauthorised requests reached the role changer %d times", n)
	}
	if rec := postRole(s, `{"role":"master"}`, "s3cret"); rec.Code != http.StatusOK {
		t.Fatalf("with the token: %d %s", rec.Code, rec.Body)
	}
}

// TestRoleConflict: classic mode (no RoleChanger) and refused changes
// answer 409; other failures 500 or 503; success 200 with the new status.
func TestRoleConflict(t *testing.T) {
	s, _ := roleServer(t, nil, "")
	rec := postRole(s, `{"role":"master"}`, "")
	if rec.Code != http.StatusConflict || !strings.Contains(errorOf(t, rec), "autoswitch") {
		t.Fatalf("classic: %d %s", rec.Code, rec.Body)
	}

	roles := &fakeRoles{}
	s, b := roleServer(t, roles, "")
	roles.b = b
	for _, c := range []struct {
		err  error
		code int
		want string
	}{
		{fmt.Errorf("%w: already the master of epoch 3", ErrRoleRefused), http.StatusConflict, "already the master"},
		{fmt.Errorf("%w: epoch 2 is older", ErrRoleRefused), http.StatusConflict, "older"},
		{ErrRoleUnsupported, http.StatusConflict, "autoswitch"},
		{fmt.Errorf("node: %w", core.ErrClosed), http.StatusServiceUnavailable, "shutting down"},
		{errors.New("disk on fire"), http.StatusInternalServerError, "disk on fire"},
	} {
		roles.err = c.err
		rec := postRole(s, `{"role":"master","epoch":7}`, "")
		if rec.Code != c.code || !strings.Contains(errorOf(t, rec), c.want) {
			t.Errorf("%v: %d %s, want %d with %q", c.err, rec.Code, rec.Body, c.code, c.want)
		}
	}
	roles.err = nil
	rec = postRole(s, `{"role":"slave","master":"127.0.0.1:10912"}`, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("demote: %d %s", rec.Code, rec.Body)
	}
	var st Status
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.SegmentSize != 1<<20 {
		t.Fatalf("demote answer is not the status: %v %s", err, rec.Body)
	}
	calls := roles.calls()
	if last := calls[len(calls)-1]; last != (RoleRequest{Role: RoleSlave, Master: "127.0.0.1:10912"}) {
		t.Fatalf("the role changer got %+v", last)
	}
	if first := calls[0]; first != (RoleRequest{Role: RoleMaster, Epoch: 7}) {
		t.Fatalf("the role changer got %+v", first)
	}
	// Demoted: a put answers 403 as on any slave.
	req := httptest.NewRequest(http.MethodPost, "/v1/topics/T/messages", strings.NewReader("x"))
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Fatalf("put after demote: %d %s", rec.Code, rec.Body)
	}
}

// TestPutFenced: a put failed with core.ErrFenced answers 503; the message
// says whether the message is stored (it waited for slaves) or not.
func TestPutFenced(t *testing.T) {
	for _, stored := range []bool{true, false} {
		s, err := New(Config{Backend: &fencedBackend{fakeBackend: newFake(), stored: stored}})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/topics/T/messages", strings.NewReader("body")))
		if rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("stored=%v: %d %s", stored, rec.Code, rec.Body)
		}
		msg := errorOf(t, rec)
		if stored && (!strings.Contains(msg, "stored on this node at offset 0") || !strings.Contains(msg, "may be cut")) {
			t.Fatalf("fenced stored put: %q", msg)
		}
		if !stored && !strings.Contains(msg, "not stored") {
			t.Fatalf("refused put: %q", msg)
		}
	}
}

// fencedBackend fails every put with core.ErrFenced: after storing it
// (a sync put fenced while it waited) or before.
type fencedBackend struct {
	*fakeBackend
	stored bool
}

// PutBatch puts the messages one after the other (Put does not wait).
func (f *fencedBackend) PutBatch(ctx context.Context, msgs []*record.Message) []core.BatchPut {
	return putInTurn(ctx, f.Put, msgs)
}

func (f *fencedBackend) Put(ctx context.Context, msg *record.Message) (core.PutResult, error) {
	if !f.stored {
		return core.PutResult{}, fmt.Errorf("replicator: %w", core.ErrFenced)
	}
	res, err := f.fakeBackend.Put(ctx, msg)
	if err != nil {
		return res, err
	}
	res.Status = core.FlushSlaveTimeout
	return res, fmt.Errorf("replicator: %w: demoted", core.ErrFenced)
}

// TestReadLimit: with Config.ReadLimit, reads stop at the last record that
// ends at or below the limit, max_offset says the limit, offsets past it
// answer 416, and the status keeps the store's true offsets.
func TestReadLimit(t *testing.T) {
	b := newFake()
	var mu sync.Mutex
	limit := int64(0)
	s, err := New(Config{Backend: b, ReadLimit: func() int64 { mu.Lock(); defer mu.Unlock(); return limit }})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := b.Put(context.Background(), &record.Message{Topic: "T", Body: []byte(fmt.Sprintf("m%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	size := int64(recOverhead + 2)
	get := func(url string) (*httptest.ResponseRecorder, Messages) {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, url, nil))
		var m Messages
		if rec.Code == http.StatusOK {
			if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
		}
		return rec, m
	}
	for _, c := range []struct {
		limit int64
		n     int
	}{{0, 0}, {size - 1, 0}, {size, 1}, {2*size + 5, 2}, {4 * size, 4}, {1 << 40, 4}} {
		mu.Lock()
		limit = c.limit
		mu.Unlock()
		rec, m := get("/v1/messages?offset=0")
		if rec.Code != http.StatusOK || len(m.Messages) != c.n {
			t.Fatalf("limit %d: %d, %d messages, want %d: %s", c.limit, rec.Code, len(m.Messages), c.n, rec.Body)
		}
		wantMax := min(c.limit, 4*size)
		if m.MaxOffset != wantMax || m.NextOffset != int64(c.n)*size {
			t.Fatalf("limit %d: max_offset %d next_offset %d, want %d and %d", c.limit, m.MaxOffset, m.NextOffset, wantMax, int64(c.n)*size)
		}
	}
	mu.Lock()
	limit = size
	mu.Unlock()
	if rec, _ := get("/v1/messages?offset=" + fmt.Sprint(2*size)); rec.Code != http.StatusRequestedRangeNotSatisfiable {
		t.Fatalf("offset past the limit: %d %s", rec.Code, rec.Body)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/status", nil))
	var st Status
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.MaxOffset != 4*size {
		t.Fatalf("status max_offset %d (%v), want the true %d", st.MaxOffset, err, 4*size)
	}
}

// TestReadLimitLongPoll: a long poll at the limit returns once the limit
// moves, without a store change.
func TestReadLimitLongPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newFake()
		var mu sync.Mutex
		limit := int64(0)
		s, err := New(Config{Backend: b, ReadLimit: func() int64 { mu.Lock(); defer mu.Unlock(); return limit }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Put(context.Background(), &record.Message{Topic: "T", Body: []byte("m0")}); err != nil {
			t.Fatal(err)
		}
		done := make(chan *httptest.ResponseRecorder)
		go func() {
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/messages?offset=0&wait=10s", nil))
			done <- rec
		}()
		time.Sleep(time.Second)
		select {
		case rec := <-done:
			t.Fatalf("the long poll returned before the limit moved: %s", rec.Body)
		default:
		}
		mu.Lock()
		limit = 1 << 20
		mu.Unlock()
		start := time.Now()
		rec := <-done
		if el := time.Since(start); el > time.Second {
			t.Fatalf("the long poll took %s after the limit moved", el)
		}
		var m Messages
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil || len(m.Messages) != 1 {
			t.Fatalf("long poll: %v %s", err, rec.Body)
		}
	})
}

// FuzzRoleRequest posts arbitrary bodies to POST /v1/role: it never
// panics, answers JSON, and reaches the role changer only with a valid
// request (200), refusing everything else with 400 or 413.
func FuzzRoleRequest(f *testing.F) {
	f.Add([]byte(`{"role":"master"}`))
	f.Add([]byte(`{"role":"master","epoch":5}`))
	f.Add([]byte(`{"role":"slave","master":"127.0.0.1:10912"}`))
	f.Add([]byte(`{"role":"slave","master":"[::1]:1"}`))
	f.Add([]byte(`{"role":"slave"}`))
	f.Add([]byte(`{"role":1}`))
	f.Add([]byte(`{"role":"master"}garbage`))
	f.Fuzz(func(t *testing.T, body []byte) {
		roles := &fakeRoles{}
		s, _ := roleServer(t, roles, "")
		rec := postRole(s, string(body), "")
		calls := roles.calls()
		switch rec.Code {
		case http.StatusOK:
			if len(calls) != 1 {
				t.Fatalf("200 after %d calls", len(calls))
			}
			req := calls[0]
			if again, err := ParseRoleRequest(body); err != nil || again != req {
				t.Fatalf("accepted %q but parses as %+v, %v", body, again, err)
			}
			if (req.Role == RoleSlave) == (req.Master == "") || req.Epoch < 0 {
				t.Fatalf("accepted an invalid request %+v", req)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if len(calls) != 0 {
				t.Fatalf("%d but the role changer was called", rec.Code)
			}
			errorOf(t, rec)
		default:
			t.Fatalf("code %d: %s", rec.Code, rec.Body)
		}
	})
}
