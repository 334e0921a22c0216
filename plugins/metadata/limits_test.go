package metadata

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/replicatorhq/replicator/sdk/meta"
)

func TestStoreLimitsDocumentsAndTotalSize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	reg := prometheus.NewPedanticRegistry()
	st, err := Open(dir, Options{Clock: newFakeClock(), Logger: newTestLogger(t, nil), MaxDocuments: 3, MaxTotalSize: 100, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, n := range []string{"a", "b", "c"} {
		if _, err := st.Put(ctx, n, json.RawMessage(`{"k":1}`)); err != nil {
			t.Fatalf("put %s: %v", n, err)
		}
	}
	// A fourth document is refused; replacing one is not.
	if _, err := st.Put(ctx, "d", json.RawMessage(`{"k":1}`)); !errors.Is(err, ErrLimit) {
		t.Fatalf("fourth document: %v, want ErrLimit", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "d")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused document on disk: %v", err)
	}
	if _, err := st.Put(ctx, "a", json.RawMessage(`{"k":2}`)); err != nil {
		t.Fatalf("replace: %v", err)
	}
	// 3 x 7 bytes stored; a body that takes the total over 100 is refused.
	big := json.RawMessage(`{"k":"` + strings.Repeat("x", 80) + `"}`)
	if _, err := st.Put(ctx, "b", big); !errors.Is(err, ErrLimit) {
		t.Fatalf("over the total size: %v, want ErrLimit", err)
	}
	// Apply is bounded the same way, all or nothing.
	err = st.Apply(ctx, []meta.Document{{Name: "a", Body: json.RawMessage(`{}`)}, {Name: "e", Body: json.RawMessage(`{}`)}})
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("apply over the count: %v", err)
	}
	if d := mustGet(t, st, "a"); string(d.Body) != `{"k":2}` {
		t.Fatalf("refused apply changed a: %s", d.Body)
	}
	// Deleting makes room.
	if err := st.Delete(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, "d", json.RawMessage(`{"k":1}`)); err != nil {
		t.Fatalf("after delete: %v", err)
	}
	if got := testutil.ToFloat64(st.refused.WithLabelValues("documents")); got != 2 {
		t.Errorf("refused{documents} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(st.refused.WithLabelValues("total_size")); got != 1 {
		t.Errorf("refused{total_size} = %v, want 1", got)
	}
	want := `
# HELP replicator_metadata_documents Metadata documents in the store.
# TYPE replicator_metadata_documents gauge
replicator_metadata_documents 3
# HELP replicator_metadata_stored_bytes Sum of the metadata document bodies in the store, in bytes.
# TYPE replicator_metadata_stored_bytes gauge
replicator_metadata_stored_bytes 21
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "replicator_metadata_documents", "replicator_metadata_stored_bytes"); err != nil {
		t.Fatal(err)
	}
}

func TestStoreOverLimitOnDiskStillLoadsAndShrinks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st := openTest(t, dir, newFakeClock())
	for _, n := range []string{"a", "b", "c"} {
		if _, err := st.Put(ctx, n, json.RawMessage(`{"k":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	st2, err := Open(dir, Options{Clock: newFakeClock(), Logger: newTestLogger(t, nil), MaxDocuments: 2})
	if err != nil {
		t.Fatalf("reopen over the limit: %v", err)
	}
	defer st2.Close()
	if _, err := st2.Put(ctx, "a", json.RawMessage(`{"k":3}`)); err != nil {
		t.Fatalf("replacing over the count limit: %v", err)
	}
	if _, err := st2.Put(ctx, "z", json.RawMessage(`{}`)); !errors.Is(err, ErrLimit) {
		t.Fatalf("adding over the count limit: %v", err)
	}
}

func TestStoreDeleteIsDurableAndCrashSafe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	clk := newFakeClock()
	st := openTest(t, dir, clk)
	if _, err := st.Put(ctx, "x.json", json.RawMessage(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, "x.json", json.RawMessage(`{"v":2}`)); err != nil { // leaves x.json.bak
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "nope"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("delete missing: %v", err)
	}
	// A crash after the backup is removed leaves the current document, not
	// the older backup.
	st.crashHook = func(step string) bool { return step == "removed x.json.bak" }
	if err := st.Delete(ctx, "x.json"); !errors.Is(err, errCrash) {
		t.Fatalf("crash: %v", err)
	}
	st.Close()
	st2 := openTest(t, dir, clk)
	if d := mustGet(t, st2, "x.json"); string(d.Body) != `{"v":2}` {
		t.Fatalf("after a crash in delete: %s", d.Body)
	}
	if err := st2.Delete(ctx, "x.json"); err != nil {
		t.Fatal(err)
	}
	if _, err := st2.Get(ctx, "x.json"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	st2.Close()
	st3 := openTest(t, dir, clk)
	if _, err := st3.Get(ctx, "x.json"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("deleted document back after reopen: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "x.json") {
			t.Fatalf("file %s left", e.Name())
		}
	}
}

func TestPluginHTTPDeleteAndJSONErrors(t *testing.T) {
	t.Parallel()
	h, st, _ := newTestHandler(t, false, 0)
	if rec := serve(h, "PUT", "/v1/metadata/gone.json", strings.NewReader(`{"a":1}`)); rec.Code != 200 {
		t.Fatalf("PUT %d %s", rec.Code, rec.Body)
	}
	rec := serve(h, "DELETE", "/v1/metadata/gone.json", nil)
	var dr DeleteResponse
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &dr) != nil || !dr.Deleted || dr.Name != "gone.json" {
		t.Fatalf("DELETE %d %s", rec.Code, rec.Body)
	}
	if _, err := st.Get(context.Background(), "gone.json"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("still there: %v", err)
	}
	if rec := serve(h, "DELETE", "/v1/metadata/gone.json", nil); rec.Code != 404 {
		t.Fatalf("DELETE again %d", rec.Code)
	}
	// Other methods: 405 with a JSON message and an Allow header.
	for _, tc := range []struct{ method, path, allow string }{
		{"POST", "/v1/metadata/x", "GET, PUT, DELETE"},
		{"PATCH", "/v1/metadata/x", "GET, PUT, DELETE"},
		{"DELETE", "/v1/metadata", "GET"},
		{"PUT", "/v1/metadata", "GET"},
	} {
		rec := serve(h, tc.method, tc.path, strings.NewReader(`{}`))
		var er ErrorResponse
		if rec.Code != 405 || rec.Header().Get("Content-Type") != "application/json" || json.Unmarshal(rec.Body.Bytes(), &er) != nil || er.Error == "" {
			t.Errorf("%s %s = %d %q %s", tc.method, tc.path, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
		}
		if got := rec.Header().Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, got, tc.allow)
		}
	}
	// Read-only: 403.
	ro, _, _ := newTestHandler(t, true, 0)
	if rec := serve(ro, "DELETE", "/v1/metadata/topics.json", nil); rec.Code != 403 {
		t.Fatalf("read-only DELETE %d", rec.Code)
	}
}

func TestPluginHTTPLimitAnswers507(t *testing.T) {
	t.Parallel()
	st, err := Open(t.TempDir(), Options{Clock: newFakeClock(), MaxDocuments: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h, err := NewHandler(HandlerConfig{Store: st, Logger: newTestLogger(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if rec := serve(h, "PUT", "/v1/metadata/one", strings.NewReader(`{}`)); rec.Code != 200 {
		t.Fatalf("first %d %s", rec.Code, rec.Body)
	}
	rec := serve(h, "PUT", "/v1/metadata/two", strings.NewReader(`{}`))
	if rec.Code != 507 || !strings.Contains(rec.Body.String(), "limit") {
		t.Fatalf("over the limit: %d %s", rec.Code, rec.Body)
	}
}

func TestSyncerDeletesWhatTheMasterDeleted(t *testing.T) {
	t.Parallel()
	m := newTestMaster(t)
	m.put("custom.json", `{"k":1}`)
	s := newTestSlave(t, m, 10*time.Second)
	if r := s.start(t); r.Err != nil {
		t.Fatal(r.Err)
	}
	s.doc(t, "custom.json")
	if err := m.store.Delete(context.Background(), "custom.json"); err != nil {
		t.Fatal(err)
	}
	r := s.tick()
	if r.Err != nil || strings.Join(r.Deleted, ",") != "custom.json" {
		t.Fatalf("round %+v", r)
	}
	if _, err := s.store.Get(context.Background(), "custom.json"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("slave still has it: %v", err)
	}
	if got := testutil.ToFloat64(s.syncer.metrics.deleted); got != 1 {
		t.Errorf("deleted metric %v", got)
	}
	if r := s.tick(); r.Err != nil || len(r.Deleted) != 0 {
		t.Fatalf("idle round %+v", r)
	}
}
