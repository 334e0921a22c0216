package metadata

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/sdk/meta"
)

func openTest(t *testing.T, dir string, clk Clock) *Store {
	t.Helper()
	s, err := Open(dir, Options{Clock: clk, Logger: newTestLogger(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustGet(t *testing.T, s *Store, name string) meta.Document {
	t.Helper()
	d, err := s.Get(context.Background(), name)
	if err != nil {
		t.Fatalf("Get(%s): %v", name, err)
	}
	return d
}

func TestStorePutGetListPersist(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := ConfigDir(t.TempDir())
	clk := newFakeClock()
	s := openTest(t, dir, clk)

	d1, err := s.Put(ctx, TopicsName, json.RawMessage(`{"topicConfigTable":{"A":{"perm":6}},"dataVersion":{"counter":99}}`))
	if err != nil {
		t.Fatal(err)
	}
	want1 := meta.DataVersion{Timestamp: clk.Now().UnixMilli(), Counter: 1}
	if d1.Version != want1 || string(d1.Body) != `{"topicConfigTable":{"A":{"perm":6}}}` {
		t.Fatalf("Put = %+v %s", d1.Version, d1.Body)
	}
	clk.Advance(time.Second)
	d2, err := s.Put(ctx, TopicsName, json.RawMessage(`{"topicConfigTable":{"B":{}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want2 := meta.DataVersion{Timestamp: clk.Now().UnixMilli(), Counter: 2}
	if d2.Version != want2 {
		t.Fatalf("second Put version %+v, want %+v", d2.Version, want2)
	}
	if _, err := s.Put(ctx, "other-doc", json.RawMessage(`{"k":"v"}`)); err != nil {
		t.Fatal(err)
	}

	// The file is RocketMQ's form: dataVersion first, then the body; the
	// previous version is NAME.bak.
	main, _ := os.ReadFile(filepath.Join(dir, TopicsName))
	if string(main) != fmt.Sprintf(`{"dataVersion":{"stateVersion":0,"timestamp":%d,"counter":2},"topicConfigTable":{"B":{}}}`, want2.Timestamp) {
		t.Fatalf("file = %s", main)
	}
	bak, _ := os.ReadFile(filepath.Join(dir, TopicsName+".bak"))
	if v, body, err := DecodeDocument(bak); err != nil || v != want1 || string(body) != `{"topicConfigTable":{"A":{"perm":6}}}` {
		t.Fatalf("bak = %s", bak)
	}

	list, err := s.List(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "other-doc" || list[1] != (meta.Entry{Name: TopicsName, Version: want2}) {
		t.Fatalf("List = %+v %v", list, err)
	}
	if _, err := s.Get(ctx, "missing.json"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("Get missing = %v", err)
	}
	s.Close()
	if _, err := s.List(ctx); !errors.Is(err, meta.ErrClosed) {
		t.Fatalf("List after Close = %v", err)
	}

	s2 := openTest(t, dir, clk)
	if d := mustGet(t, s2, TopicsName); d.Version != want2 || string(d.Body) != `{"topicConfigTable":{"B":{}}}` {
		t.Fatalf("after reopen %+v %s", d.Version, d.Body)
	}
}

func TestStoreCreateDefaults(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := newFakeClock()
	s, err := Open(dir, Options{Clock: clk, CreateDefaults: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for name, body := range DefaultDocuments {
		d := mustGet(t, s, name)
		if string(d.Body) != body || d.Version != (meta.DataVersion{Timestamp: clk.Now().UnixMilli()}) {
			t.Errorf("%s = %+v %s", name, d.Version, d.Body)
		}
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	// A second Open keeps them as they are.
	clk.Advance(time.Hour)
	s2, err := Open(dir, Options{Clock: clk, CreateDefaults: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if d := mustGet(t, s2, TopicsName); d.Version.Timestamp == clk.Now().UnixMilli() {
		t.Fatal("defaults recreated")
	}
}

// RocketMQ's own files: pretty-printed fastjson, bare integer keys, 4.x
// consumer offsets without a dataVersion.
func TestStoreLoadsRocketMQFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(ConsumerOffsetName, "{\n\t\"offsetTable\":{\n\t\t\"TopicTest@g1\":{0:250,1:251}\n\t}\n}")
	write(TopicsName, "{\n\t\"dataVersion\":{\n\t\t\"counter\":5,\n\t\t\"stateVersion\":0,\n\t\t\"timestamp\":1700000000000\n\t},\n\t\"topicConfigTable\":{}\n}")
	write(".hidden", "not ours")
	write("timercheck", "\x00\x00\x01\x8c")         // RocketMQ's binary timer checkpoint: not a document
	write("broken.json", "{\"topicConfigTable\":{") // a damaged document without a backup
	if _, err := Open(dir, Options{}); !errors.Is(err, meta.ErrInvalidDocument) {
		t.Fatalf("Open with a damaged document = %v", err)
	}
	os.Remove(filepath.Join(dir, "broken.json"))
	s := openTest(t, dir, newFakeClock())
	co := mustGet(t, s, ConsumerOffsetName)
	if co.Version != (meta.DataVersion{}) || string(co.Body) != "{\"offsetTable\":{\n\t\t\"TopicTest@g1\":{\"0\":250,\"1\":251}\n\t}}" {
		t.Fatalf("consumerOffset = %+v %s", co.Version, co.Body)
	}
	if tp := mustGet(t, s, TopicsName); tp.Version != (meta.DataVersion{Timestamp: 1700000000000, Counter: 5}) {
		t.Fatalf("topics version %+v", tp.Version)
	}
	list, _ := s.List(context.Background())
	if len(list) != 2 {
		t.Fatalf("List = %+v", list)
	}
}

// A crash between writing and renaming, or a main file garbled afterwards,
// leaves a readable document: the previous version from NAME.bak.
func TestStoreCrashFallbackToBak(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newFakeClock()
	setup := func(t *testing.T) (string, meta.DataVersion) {
		dir := t.TempDir()
		s := openTest(t, dir, clk)
		if _, err := s.Put(ctx, TopicsName, json.RawMessage(`{"gen":1}`)); err != nil {
			t.Fatal(err)
		}
		d, err := s.Put(ctx, TopicsName, json.RawMessage(`{"gen":2}`))
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		return dir, d.Version
	}
	p := func(dir, suffix string) string { return filepath.Join(dir, TopicsName+suffix) }
	cases := []struct {
		name    string
		damage  func(dir string)
		wantGen string
	}{
		{"garbled main", func(dir string) { os.WriteFile(p(dir, ""), []byte(`{"dataVersion":{"coun`), 0o644) }, `{"gen":1}`},
		{"empty main", func(dir string) { os.WriteFile(p(dir, ""), nil, 0o644) }, `{"gen":1}`},
		{"main missing (crash after backup rename)", func(dir string) { os.Remove(p(dir, "")) }, `{"gen":1}`},
		{"complete tmp left, no journal", func(dir string) {
			os.WriteFile(p(dir, ".tmp"), EncodeDocument(meta.DataVersion{Counter: 3}, json.RawMessage(`{"gen":3}`)), 0o644)
		}, `{"gen":2}`},
		{"torn tmp and garbled main", func(dir string) {
			os.WriteFile(p(dir, ".tmp"), []byte(`{"dataVersion":{"counter":3},"ge`), 0o644)
			os.WriteFile(p(dir, ""), []byte("\x00\x00\x00"), 0o644)
		}, `{"gen":1}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir, _ := setup(t)
			c.damage(dir)
			s := openTest(t, dir, clk)
			if d := mustGet(t, s, TopicsName); string(d.Body) != c.wantGen {
				t.Fatalf("after damage: %s, want %s", d.Body, c.wantGen)
			}
			if _, err := os.Stat(p(dir, ".tmp")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("stray tmp not removed: %v", err)
			}
			// The next write must not replace the good backup with the
			// unreadable main file.
			bakBefore, _ := os.ReadFile(p(dir, ".bak"))
			if _, err := s.Put(ctx, TopicsName, json.RawMessage(`{"gen":4}`)); err != nil {
				t.Fatal(err)
			}
			bak, _ := os.ReadFile(p(dir, ".bak"))
			_, bakBody, err := DecodeDocument(bak)
			if err != nil {
				t.Fatalf("backup unreadable after the next write: %q", bak)
			}
			if c.wantGen == `{"gen":1}` && string(bak) != string(bakBefore) {
				t.Fatalf("good backup replaced: %s", bak)
			}
			if c.wantGen == `{"gen":2}` && string(bakBody) != `{"gen":2}` {
				t.Fatalf("backup = %s", bak)
			}
		})
	}
	t.Run("main and backup unreadable", func(t *testing.T) {
		t.Parallel()
		dir, _ := setup(t)
		os.WriteFile(p(dir, ""), []byte("{"), 0o644)
		os.WriteFile(p(dir, ".bak"), []byte("}"), 0o644)
		if _, err := Open(dir, Options{}); !errors.Is(err, meta.ErrInvalidDocument) {
			t.Fatalf("Open = %v, want meta.ErrInvalidDocument", err)
		}
	})
}

// TestStoreCrashAtEveryStep stops a Put and a three-document Apply at every
// step of the write protocol (as if the process died there), reopens, and
// checks every document is readable and the Apply all-or-nothing.
func TestStoreCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	docNames := []string{"a.json", "b.json", "c.json"}
	gen := func(n int) []meta.Document {
		var out []meta.Document
		for _, name := range docNames {
			out = append(out, meta.Document{Name: name, Version: meta.DataVersion{Counter: int64(n)}, Body: json.RawMessage(fmt.Sprintf(`{"gen":%d}`, n))})
		}
		return out
	}
	type op struct {
		name  string
		write func(s *Store) error
	}
	ops := []op{
		{"apply", func(s *Store) error { return s.Apply(ctx, gen(2)) }},
		{"put", func(s *Store) error { _, err := s.Put(ctx, "a.json", json.RawMessage(`{"gen":2}`)); return err }},
	}
	for _, o := range ops {
		// Collect the steps of the second write only.
		dir := t.TempDir()
		s := openTest(t, dir, newFakeClock())
		if err := s.Apply(ctx, gen(1)); err != nil {
			t.Fatal(err)
		}
		var all []string
		s.crashHook = func(step string) bool { all = append(all, step); return false }
		if err := o.write(s); err != nil {
			t.Fatal(err)
		}
		if o.name == "apply" && len(all) != 2+2*len(docNames) {
			t.Fatalf("apply steps = %v", all)
		}
		for i, step := range all {
			t.Run(fmt.Sprintf("%s/%d-%s", o.name, i, strings.ReplaceAll(step, " ", "_")), func(t *testing.T) {
				dir := t.TempDir()
				s, err := Open(dir, Options{Clock: newFakeClock()})
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Apply(ctx, gen(1)); err != nil {
					t.Fatal(err)
				}
				n := 0
				s.crashHook = func(string) bool { n++; return n == i+1 }
				if err := o.write(s); !errors.Is(err, errCrash) {
					t.Fatalf("write = %v, want the simulated crash", err)
				}
				// The process is gone: reopen from disk.
				r := openTest(t, dir, newFakeClock())
				seen := map[string]bool{}
				for _, name := range docNames {
					seen[string(mustGet(t, r, name).Body)] = true
				}
				if o.name == "apply" && len(seen) != 1 {
					t.Fatalf("apply not atomic across a crash at %q: %v", step, seen)
				}
				if o.name == "apply" && i >= 1 && !seen[`{"gen":2}`] {
					t.Fatalf("journaled apply not rolled forward at %q: %v", step, seen)
				}
				for f := range dirSnapshot(t, dir) {
					if strings.HasSuffix(f, ".tmp") || f == journalName {
						t.Fatalf("left %s behind", f)
					}
				}
			})
		}
	}
}

func TestStoreRejectsBadWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, Options{MaxDocumentSize: 64, CreateDefaults: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := dirSnapshot(t, dir)
	big := json.RawMessage(`{"x":"` + strings.Repeat("a", 64) + `"}`)
	puts := []struct {
		name string
		body string
		want error
	}{
		{"a/b", `{}`, meta.ErrInvalidName},
		{"..", `{}`, meta.ErrInvalidName},
		{TopicsName, `nope`, meta.ErrInvalidDocument},
		{TopicsName, `[1]`, meta.ErrInvalidDocument},
		{TopicsName, `{0:1}`, meta.ErrInvalidDocument},
		{TopicsName, string(big), meta.ErrTooLarge},
	}
	for _, p := range puts {
		if _, err := s.Put(ctx, p.name, json.RawMessage(p.body)); !errors.Is(err, p.want) {
			t.Errorf("Put(%q, %q) = %v, want %v", p.name, p.body, err, p.want)
		}
	}
	applies := []struct {
		docs []meta.Document
		want error
	}{
		{[]meta.Document{{Name: "x.json", Body: json.RawMessage(`{}`)}, {Name: "x.json", Body: json.RawMessage(`{}`)}}, meta.ErrInvalidDocument},
		{[]meta.Document{{Name: "x.json", Body: json.RawMessage(`{}`)}, {Name: "bad\x00", Body: json.RawMessage(`{}`)}}, meta.ErrInvalidName},
		{[]meta.Document{{Name: "x.json", Body: json.RawMessage(`{}`)}, {Name: "y.json", Body: json.RawMessage(`{`)}}, meta.ErrInvalidDocument},
		{[]meta.Document{{Name: "x.json", Body: big}}, meta.ErrTooLarge},
	}
	for _, a := range applies {
		if err := s.Apply(ctx, a.docs); !errors.Is(err, a.want) {
			t.Errorf("Apply = %v, want %v", err, a.want)
		}
	}
	if after := dirSnapshot(t, dir); !sameSnapshot(before, after) {
		t.Fatalf("disk changed: %v -> %v", names(before), names(after))
	}
}

func TestStoreApplyKeepsGivenVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, t.TempDir(), newFakeClock())
	v := meta.DataVersion{StateVersion: 3, Timestamp: 42, Counter: 9}
	if err := s.Apply(ctx, []meta.Document{{Name: TopicsName, Version: v, Body: json.RawMessage(`{"dataVersion":{"counter":1},"t":{}}`)}}); err != nil {
		t.Fatal(err)
	}
	if d := mustGet(t, s, TopicsName); d.Version != v || string(d.Body) != `{"t":{}}` {
		t.Fatalf("%+v %s", d.Version, d.Body)
	}
	if err := s.Apply(ctx, nil); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Apply(cctx, []meta.Document{{Name: "z", Body: json.RawMessage(`{}`)}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply with a cancelled ctx = %v", err)
	}
}
