package metadatatest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/replicatorhq/replicator/plugins/metadata"
	"github.com/replicatorhq/replicator/sdk/meta"
)

// TestLocalStore runs the Source and Sink contract against stores made by
// open, each empty. Third-party implementations run it too.
func TestLocalStore(t *testing.T, open func(t *testing.T) metadata.LocalStore) {
	ctx := context.Background()
	body := func(s string) json.RawMessage { return json.RawMessage(s) }

	t.Run("EmptyList", func(t *testing.T) {
		st := open(t)
		list, err := st.List(ctx)
		if err != nil || len(list) != 0 {
			t.Fatalf("List = %+v %v", list, err)
		}
		if _, err := st.Get(ctx, "topics.json"); !errors.Is(err, meta.ErrNotFound) {
			t.Fatalf("Get on empty = %v, want ErrNotFound", err)
		}
	})

	t.Run("ApplyKeepsVersionsAndSorts", func(t *testing.T) {
		st := open(t)
		v1 := meta.DataVersion{StateVersion: 1, Timestamp: 2, Counter: 3}
		v2 := meta.DataVersion{Counter: 9}
		if err := st.Apply(ctx, []meta.Document{
			{Name: "z.json", Version: v1, Body: body(`{"a":1}`)},
			{Name: "a.json", Version: v2, Body: body(`{"dataVersion":{"counter":77},"b":[2]}`)},
		}); err != nil {
			t.Fatal(err)
		}
		list, err := st.List(ctx)
		if err != nil || len(list) != 2 || list[0] != (meta.Entry{Name: "a.json", Version: v2}) || list[1] != (meta.Entry{Name: "z.json", Version: v1}) {
			t.Fatalf("List = %+v %v", list, err)
		}
		d, err := st.Get(ctx, "a.json")
		if err != nil || d.Name != "a.json" || d.Version != v2 || string(d.Body) != `{"b":[2]}` {
			t.Fatalf("Get = %+v %s %v (the dataVersion member must be dropped)", d, d.Body, err)
		}
	})

	t.Run("ApplyReplacesAndIsIdempotent", func(t *testing.T) {
		st := open(t)
		doc := meta.Document{Name: "t.json", Version: meta.DataVersion{Counter: 1}, Body: body(`{"x":1}`)}
		for i := 0; i < 2; i++ {
			if err := st.Apply(ctx, []meta.Document{doc}); err != nil {
				t.Fatal(err)
			}
		}
		doc.Version.Counter, doc.Body = 2, body(`{"x":2}`)
		if err := st.Apply(ctx, []meta.Document{doc}); err != nil {
			t.Fatal(err)
		}
		if d, err := st.Get(ctx, "t.json"); err != nil || d.Version.Counter != 2 || string(d.Body) != `{"x":2}` {
			t.Fatalf("Get = %+v %s %v", d, d.Body, err)
		}
		if err := st.Apply(ctx, nil); err != nil {
			t.Fatalf("empty Apply = %v", err)
		}
	})

	t.Run("ApplyAllOrNothing", func(t *testing.T) {
		st := open(t)
		good := meta.Document{Name: "good.json", Body: body(`{}`)}
		for _, c := range []struct {
			bad  meta.Document
			want error
		}{
			{meta.Document{Name: "../evil", Body: body(`{}`)}, meta.ErrInvalidName},
			{meta.Document{Name: "bad.json", Body: body(`[1]`)}, meta.ErrInvalidDocument},
			{meta.Document{Name: "good.json", Body: body(`{}`)}, meta.ErrInvalidDocument},
		} {
			if err := st.Apply(ctx, []meta.Document{good, c.bad}); !errors.Is(err, c.want) {
				t.Fatalf("Apply with %q = %v, want %v", c.bad.Name, err, c.want)
			}
			if list, _ := st.List(ctx); len(list) != 0 {
				t.Fatalf("a failed Apply left %+v", list)
			}
		}
	})

	t.Run("CallerOwnsSlices", func(t *testing.T) {
		st := open(t)
		b := []byte(`{"k":"v"}`)
		if err := st.Apply(ctx, []meta.Document{{Name: "o.json", Body: b}}); err != nil {
			t.Fatal(err)
		}
		copy(b, `{"k":"X"}`)
		d, _ := st.Get(ctx, "o.json")
		copy(d.Body, `{"k":"Y"}`)
		if d2, _ := st.Get(ctx, "o.json"); string(d2.Body) != `{"k":"v"}` {
			t.Fatalf("store kept a caller's slice: %s", d2.Body)
		}
	})

	t.Run("DeleteWhenADeleter", func(t *testing.T) {
		st := open(t)
		del, ok := st.(meta.Deleter)
		if !ok {
			t.Skip("not a meta.Deleter: the syncer keeps documents the master deleted")
		}
		if err := st.Apply(ctx, []meta.Document{{Name: "a.json", Body: body(`{}`)}, {Name: "b.json", Body: body(`{}`)}}); err != nil {
			t.Fatal(err)
		}
		if err := del.Delete(ctx, "a.json"); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Get(ctx, "a.json"); !errors.Is(err, meta.ErrNotFound) {
			t.Fatalf("Get after Delete = %v", err)
		}
		if err := del.Delete(ctx, "a.json"); !errors.Is(err, meta.ErrNotFound) {
			t.Fatalf("Delete again = %v", err)
		}
		if err := del.Delete(ctx, "../x"); !errors.Is(err, meta.ErrInvalidName) {
			t.Fatalf("Delete of a bad name = %v", err)
		}
		if list, err := st.List(ctx); err != nil || len(list) != 1 || list[0].Name != "b.json" {
			t.Fatalf("List after Delete = %+v %v", list, err)
		}
	})

	t.Run("CancelledContext", func(t *testing.T) {
		st := open(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := st.List(cctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("List = %v", err)
		}
		if err := st.Apply(cctx, []meta.Document{{Name: "c.json", Body: body(`{}`)}}); !errors.Is(err, context.Canceled) {
			t.Fatalf("Apply = %v", err)
		}
	})
}
