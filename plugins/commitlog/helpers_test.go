package commitlog

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/internal/testlog"
	"github.com/replicatorhq/replicator/sdk/record"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testOptions: small segments, logs to t, background work on.
func testOptions(t testing.TB, segSize int64) Options {
	o := DefaultOptions()
	o.SegmentSize = segSize
	o.Logger = hclog.New(&hclog.LoggerOptions{Output: io.Discard})
	if testing.Verbose() {
		o.Logger = testlog.Logger(t, "", hclog.Debug)
	}
	return o
}

func mustOpen(t testing.TB, dir string, o Options) *Log {
	t.Helper()
	l, err := Open(dir, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func mustClose(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// testMsg is a message with a body of n bytes derived from seed.
func testMsg(topic string, qid int32, n int, seed int64) *record.Message {
	body := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(body)
	return &record.Message{Topic: topic, QueueID: qid, Body: body, BornTimestamp: seed + 1,
		Properties: map[string]string{"KEYS": fmt.Sprint("k", seed)}}
}

func mustAppend(t testing.TB, l *Log, m *record.Message) int64 {
	t.Helper()
	res, err := l.Append(context.Background(), m)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return res.Offset
}

// copyDir copies a log's directory while it may be open: the files show
// what the page cache holds, i.e. the disk after a crash of the process
// (not of the machine).
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.Walk(src, func(path string, fi os.FileInfo, err error) error {
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			return nil // a preallocated .tmp segment renamed or dropped meanwhile
		}
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// patchFile applies f to the bytes of the segment holding offset.
func patchSegment(t testing.TB, dir string, segSize, offset int64, f func(b []byte, pos int64)) {
	t.Helper()
	path := segmentPath(filepath.Join(dir, "commitlog"), offset-offset%segSize)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f(b, offset%segSize)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readAll(t testing.TB, l *Log) []record.Record {
	t.Helper()
	b := l.Bounds()
	recs, next, err := l.ReadMessages(b.Min, 1<<30)
	if err != nil {
		t.Fatalf("ReadMessages: %v", err)
	}
	if next != b.Max {
		t.Fatalf("ReadMessages stopped at %d, max %d", next, b.Max)
	}
	return recs
}

// dirImage is the content of a log directory, for restoring it quickly.
type dirImage map[string][]byte

func snapshot(t testing.TB, dir string) dirImage {
	t.Helper()
	img := dirImage{}
	err := filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		b, err := os.ReadFile(path)
		img[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// restore makes dir hold exactly img, reusing the files already there.
func (img dirImage) restore(t testing.TB, dir string) {
	t.Helper()
	err := filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if _, ok := img[rel]; !ok {
			return os.Remove(path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for rel, b := range img {
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
