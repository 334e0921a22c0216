package store_test

import (
	"testing"

	"github.com/replicatorhq/replicator/sdk/store"
)

func TestSegmentName(t *testing.T) {
	for _, start := range []int64{0, 1 << 30, 123456789012} {
		name := store.SegmentName(start)
		if len(name) != store.SegmentNameLen {
			t.Fatalf("SegmentName(%d) = %q: %d characters", start, name, len(name))
		}
		if got, ok := store.ParseSegmentName(name); !ok || got != start {
			t.Fatalf("ParseSegmentName(%q) = %d, %v; want %d", name, got, ok, start)
		}
	}
	if got := store.SegmentName(1 << 30); got != "00000000001073741824" {
		t.Fatalf("SegmentName(1<<30) = %q", got)
	}
	for _, bad := range []string{"", "0000000000000000000", "000000000000000000000", "0000000000000000000x", "+0000000000000000001", "99999999999999999999"} {
		if _, ok := store.ParseSegmentName(bad); ok {
			t.Fatalf("ParseSegmentName(%q) accepted", bad)
		}
	}
}
