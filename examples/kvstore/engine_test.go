package main

import (
	"context"
	"errors"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/replicatorhq/replicator/plugins/commitlog"
	"github.com/replicatorhq/replicator/sdk/record"
)

func openTestLog(t *testing.T, dir string) *commitlog.Log {
	t.Helper()
	opts := commitlog.DefaultOptions()
	opts.SegmentSize = 64 << 10
	opts.Preallocate = false
	st, err := commitlog.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestEngineFoldsTheLog appends writes straight to a commit log and checks
// the state the engine folds from it, before and after a reopen.
func TestEngineFoldsTheLog(t *testing.T) {
	dir := t.TempDir()
	st := openTestLog(t, dir)
	ctx := context.Background()
	appendOp := func(op, key, value string) {
		t.Helper()
		msg, err := Encode(op, key, []byte(value))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Append(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	appendOp(OpPut, "a", "1")
	appendOp(OpPut, "b", "2")
	appendOp(OpPut, "a", "3")
	appendOp(OpDelete, "b", "ignored")
	// Another topic in the same log is not the engine's.
	if _, err := st.Append(ctx, &record.Message{Topic: "Other", Body: []byte("x"), Properties: map[string]string{"KEYS": "c", "TAGS": "PUT"}}); err != nil {
		t.Fatal(err)
	}
	// Enough writes to fill several 64 KiB segments (end-of-file fillers).
	big := string(make([]byte, 5000))
	for range 40 {
		appendOp(OpPut, "big", big)
	}

	check := func(e *Engine) {
		t.Helper()
		if v, ok, err := e.Get("a"); err != nil || !ok || string(v) != "3" {
			t.Errorf("a = %q, %v, %v; want 3", v, ok, err)
		}
		for _, k := range []string{"b", "c"} {
			if _, ok, err := e.Get(k); err != nil || ok {
				t.Errorf("%s present (%v, %v); want absent", k, ok, err)
			}
		}
		if v, _, _ := e.Get("big"); len(v) != 5000 {
			t.Errorf("big has %d bytes", len(v))
		}
		s, err := e.Stats()
		if err != nil || s.Keys != 2 || s.Records != 44 || s.AppliedOffset != st.Bounds().Max {
			t.Errorf("stats %+v, %v; want 2 keys, 44 records, applied %d", s, err, st.Bounds().Max)
		}
	}
	check(NewEngine(st, hclog.NewNullLogger()))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = openTestLog(t, dir)
	defer st.Close()
	if st.Bounds().Max < 3*(64<<10) {
		t.Fatalf("log too short to span segments: %+v", st.Bounds())
	}
	check(NewEngine(st, hclog.NewNullLogger()))
}

func TestEncodeRefuses(t *testing.T) {
	for _, key := range []string{"", "a b", "a/b", string(make([]byte, 129)), "k\x01"} {
		if _, err := Encode(OpPut, key, nil); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("key %q: %v, want ErrInvalidKey", key, err)
		}
	}
	if _, err := Encode(OpPut, "k", make([]byte, MaxValueSize+1)); !errors.Is(err, ErrValueTooLarge) {
		t.Errorf("big value: %v", err)
	}
}
