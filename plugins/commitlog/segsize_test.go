package commitlog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenSegmentSizeMismatch: a healthy log opened with another segment
// size is refused with ErrSegmentSizeMismatch, naming the size it was
// written with (not corruption, and nothing on disk changes); segment
// files whose sizes disagree among themselves stay corruption.
func TestOpenSegmentSizeMismatch(t *testing.T) {
	const written = 16 << 10
	dir := t.TempDir()
	l := mustOpen(t, dir, testOptions(t, written))
	for i := range 40 {
		mustAppend(t, l, crashMsg(i))
	}
	mustClose(t, l)
	segDir := filepath.Join(dir, "commitlog")
	before := readTree(t, dir)

	for _, configured := range []int64{32 << 10, 8 << 10, 1 << 30} {
		_, err := Open(dir, testOptions(t, configured))
		var se *SegmentSizeError
		if !errors.Is(err, ErrSegmentSizeMismatch) || !errors.As(err, &se) || se.Found != written || se.Configured != configured {
			t.Fatalf("open with %d-byte segments: %v, want ErrSegmentSizeMismatch found %d", configured, err, written)
		}
		if IsCorrupt(err) {
			t.Fatalf("a segment size mismatch is reported as corruption: %v", err)
		}
		if msg := err.Error(); !strings.Contains(msg, "segment size mismatch: the log was written with 16 KiB segments") ||
			!strings.Contains(msg, "--segment-size 16KiB") || strings.Contains(msg, "corrupt") {
			t.Fatalf("message %q", msg)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, allocDirName)); !os.IsNotExist(err) {
		t.Fatalf("a refused open left its allocation directory: %v", err)
	}
	after := readTree(t, dir)
	for rel, b := range before {
		if a, ok := after[rel]; !ok || !bytes.Equal(a, b) {
			t.Fatalf("a refused open changed %s", rel)
		}
	}
	l = mustOpen(t, dir, testOptions(t, written))
	if got := len(readAll(t, l)); got != 40 {
		t.Fatalf("%d records with the right size, want 40", got)
	}
	mustClose(t, l)

	// One segment of another size: the files do not form a log of any
	// size, which is corruption.
	starts, err := SegmentStarts(segDir)
	if err != nil || len(starts) < 3 {
		t.Fatalf("segments %v, %v", starts, err)
	}
	if err := os.Truncate(segmentPath(segDir, starts[1]), 2*written); err != nil {
		t.Fatal(err)
	}
	for _, configured := range []int64{written, 32 << 10} {
		_, err = Open(dir, testOptions(t, configured))
		if !IsCorrupt(err) || errors.Is(err, ErrSegmentSizeMismatch) {
			t.Fatalf("segments of mixed sizes, opened with %d: %v, want corruption", configured, err)
		}
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{16 << 20: "16 MiB", 1 << 30: "1 GiB", 4096: "4 KiB", 3 << 40: "3 TiB", 1000: "1000 bytes", 0: "0 bytes"} {
		if got := humanSize(n, " "); got != want {
			t.Errorf("humanSize(%d) = %q, want %q", n, got, want)
		}
	}
	if got := humanSize(16<<20, ""); got != "16MiB" {
		t.Errorf("humanSize(16 MiB, \"\") = %q", got)
	}
}
