package metadata

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/replicatorhq/replicator/sdk/meta"
)

func TestPluginHTTPSourceConfig(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://h/", "http://", "http://h:1/%zz"} {
		if _, err := NewHTTPSource(HTTPSourceConfig{BaseURL: u}); err == nil {
			t.Errorf("NewHTTPSource(%q) succeeded", u)
		}
	}
	if _, err := NewHTTPSource(HTTPSourceConfig{BaseURL: "http://h", MaxListSize: -1}); err == nil {
		t.Error("negative bound accepted")
	}
}

// A master mounted under a path prefix, names that need escaping, and a
// missing document.
func TestPluginHTTPSourceAgainstHandler(t *testing.T) {
	t.Parallel()
	st := openTest(t, t.TempDir(), newFakeClock())
	h, err := NewHandler(HandlerConfig{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/prefix/", http.StripPrefix("/prefix", h))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx := context.Background()
	put, err := st.Put(ctx, "a doc?#%.json", []byte(`{"k":1}`))
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewHTTPSource(HTTPSourceConfig{BaseURL: srv.URL + "/prefix/", Client: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	list, err := src.List(ctx)
	if err != nil || len(list) != 1 || list[0] != (meta.Entry{Name: put.Name, Version: put.Version}) {
		t.Fatalf("List = %+v %v", list, err)
	}
	d, err := src.Get(ctx, put.Name)
	if err != nil || d.Version != put.Version || string(d.Body) != `{"k":1}` || d.Name != put.Name {
		t.Fatalf("Get = %+v %v", d, err)
	}
	if _, err := src.Get(ctx, "absent.json"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("Get absent = %v", err)
	}
	if _, err := src.Get(ctx, "../x"); !errors.Is(err, meta.ErrInvalidName) {
		t.Fatalf("Get bad name = %v", err)
	}
	// A 404 on the list itself is a malformed answer, not "not found".
	bad, _ := NewHTTPSource(HTTPSourceConfig{BaseURL: srv.URL + "/elsewhere", Client: srv.Client()})
	if _, err := bad.List(ctx); !errors.Is(err, ErrBadResponse) || !strings.Contains(err.Error(), "404") {
		t.Fatalf("List on a wrong base = %v", err)
	}
}
