package epoch

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func open(t *testing.T, dir string) *File {
	t.Helper()
	f, err := Open(dir)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return f
}

func mustAppend(t *testing.T, f *File, epoch int32, start int64) {
	t.Helper()
	if err := f.Append(epoch, start); err != nil {
		t.Fatalf("Append(%d, %d): %v", epoch, start, err)
	}
}

func readText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeText(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func checkEntries(t *testing.T, f *File, want []Entry) {
	t.Helper()
	got := f.Entries()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Entries = %+v, want %+v", got, want)
	}
}

func TestOpenMissingIsEmpty(t *testing.T) {
	f := open(t, t.TempDir())
	if f.Len() != 0 {
		t.Fatalf("Len = %d", f.Len())
	}
	if _, ok := f.Last(); ok {
		t.Fatal("Last on an empty list")
	}
	if r := f.Recovery(); r.Source != SourceNone || r.MainErr != nil {
		t.Fatalf("Recovery = %+v", r)
	}
}

func TestOpenNotADirectory(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x")
	writeText(t, p, "")
	if _, err := Open(p); err == nil {
		t.Fatal("Open on a regular file succeeded")
	}
	if _, err := Open(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open on a missing dir: %v", err)
	}
}

func TestAppendWritesFileAndBackup(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir)
	main := filepath.Join(dir, FileName)
	bak := main + BackupSuffix

	mustAppend(t, f, 1, 0)
	if got, w := readText(t, main), want(1, "1-0\n"); got != w {
		t.Fatalf("main = %q, want %q", got, w)
	}
	if _, err := os.Stat(bak); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("backup after the first write: %v", err)
	}
	mustAppend(t, f, 2, 4096)
	if got, w := readText(t, main), "2\n1694929738\n1-0\n2-4096\n"; got != w {
		t.Fatalf("main = %q, want %q", got, w)
	}
	if got, w := readText(t, bak), want(1, "1-0\n"); got != w {
		t.Fatalf("backup = %q, want the previous main %q", got, w)
	}
	if _, err := os.Stat(main + tmpSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("tmp file left behind: %v", err)
	}
	checkEntries(t, f, []Entry{{1, 0, 4096}, {2, 4096, Unbounded}})
}

func TestAppendRule(t *testing.T) {
	f := open(t, t.TempDir())
	if err := f.Append(-1, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative epoch: %v", err)
	}
	if err := f.Append(1, -5); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative start: %v", err)
	}
	mustAppend(t, f, 3, 100)
	for _, c := range []struct {
		epoch int32
		start int64
	}{{3, 200}, {2, 200}, {4, 99}, {3, 100}} {
		if err := f.Append(c.epoch, c.start); !errors.Is(err, ErrNotNewer) {
			t.Fatalf("Append(%d, %d) = %v, want ErrNotNewer", c.epoch, c.start, err)
		}
	}
	checkEntries(t, f, []Entry{{3, 100, Unbounded}})
	mustAppend(t, f, 5, 300)
	checkEntries(t, f, []Entry{{3, 100, 300}, {5, 300, Unbounded}})
}

// A node promoted twice (or more) without writing: each new epoch replaces
// the empty one, so the list stays usable and its last epoch is the
// current one.
func TestAppendReplacesEmptyEpoch(t *testing.T) {
	dir := t.TempDir()
	f := open(t, dir)
	mustAppend(t, f, 1, 0)
	mustAppend(t, f, 2, 500)
	mustAppend(t, f, 3, 500)
	mustAppend(t, f, 4, 500)
	checkEntries(t, f, []Entry{{1, 0, 500}, {4, 500, Unbounded}})
	if got, w := readText(t, filepath.Join(dir, FileName)), want(2, "1-0\n4-500\n"); got != w {
		t.Fatalf("main = %q, want %q", got, w)
	}
	// An empty first epoch is replaced too.
	g := open(t, t.TempDir())
	mustAppend(t, g, 1, 0)
	mustAppend(t, g, 2, 0)
	checkEntries(t, g, []Entry{{2, 0, Unbounded}})
	// The replaced epoch is gone, the replacing one is found by offset.
	if e, ok := f.FindByOffset(500); !ok || e.Epoch != 4 {
		t.Fatalf("FindByOffset(500) = %+v, %v", e, ok)
	}
	if _, ok := f.Get(3); ok {
		t.Fatal("replaced epoch 3 still present")
	}
}

func TestLookups(t *testing.T) {
	f := open(t, t.TempDir())
	mustAppend(t, f, 1, 0)
	mustAppend(t, f, 3, 100)
	mustAppend(t, f, 7, 250)

	if e, ok := f.Last(); !ok || e != (Entry{7, 250, Unbounded}) {
		t.Fatalf("Last = %+v, %v", e, ok)
	}
	if f.Len() != 3 {
		t.Fatalf("Len = %d", f.Len())
	}
	for _, c := range []struct {
		off   int64
		epoch int32
		ok    bool
	}{{-1, 0, false}, {0, 1, true}, {99, 1, true}, {100, 3, true}, {249, 3, true}, {250, 7, true}, {1 << 60, 7, true}, {Unbounded, 0, false}} {
		e, ok := f.FindByOffset(c.off)
		if ok != c.ok || (ok && e.Epoch != c.epoch) {
			t.Fatalf("FindByOffset(%d) = %+v, %v; want epoch %d, %v", c.off, e, ok, c.epoch, c.ok)
		}
	}
	for _, c := range []struct {
		epoch int32
		want  Entry
		ok    bool
	}{{1, Entry{1, 0, 100}, true}, {3, Entry{3, 100, 250}, true}, {2, Entry{}, false}, {8, Entry{}, false}} {
		e, ok := f.Get(c.epoch)
		if ok != c.ok || e != c.want {
			t.Fatalf("Get(%d) = %+v, %v", c.epoch, e, ok)
		}
	}
	for _, c := range []struct {
		epoch int32
		want  int32
		ok    bool
	}{{0, 1, true}, {1, 3, true}, {2, 3, true}, {3, 7, true}, {6, 7, true}, {7, 0, false}} {
		e, ok := f.Next(c.epoch)
		if ok != c.ok || (ok && e.Epoch != c.want) {
			t.Fatalf("Next(%d) = %+v, %v; want %d, %v", c.epoch, e, ok, c.want, c.ok)
		}
	}
	// Entries is a copy.
	es := f.Entries()
	es[0].Epoch = 99
	if e, _ := f.Get(1); e.Epoch != 1 {
		t.Fatal("Entries returned the internal slice")
	}
}

// An empty epoch read from a file (equal start offsets, as a RocketMQ
// controller's list may hold) covers no offset.
func TestFindByOffsetSkipsEmptyEpoch(t *testing.T) {
	dir := t.TempDir()
	writeText(t, filepath.Join(dir, FileName), want(3, "1-0\n2-50\n3-50\n"))
	f := open(t, dir)
	if e, ok := f.FindByOffset(50); !ok || e.Epoch != 3 {
		t.Fatalf("FindByOffset(50) = %+v, %v", e, ok)
	}
	if e, ok := f.FindByOffset(49); !ok || e.Epoch != 1 {
		t.Fatalf("FindByOffset(49) = %+v, %v", e, ok)
	}
}

func newList(t *testing.T) (*File, string) {
	t.Helper()
	dir := t.TempDir()
	f := open(t, dir)
	mustAppend(t, f, 1, 0)
	mustAppend(t, f, 2, 100)
	mustAppend(t, f, 4, 300)
	mustAppend(t, f, 5, 600)
	return f, dir
}

func TestTruncateSuffixByEpoch(t *testing.T) {
	f, dir := newList(t)
	if err := f.TruncateSuffixByEpoch(3); err != nil {
		t.Fatal(err)
	}
	w := []Entry{{1, 0, 100}, {2, 100, Unbounded}}
	checkEntries(t, f, w)
	checkEntries(t, open(t, dir), w)
	if err := f.TruncateSuffixByEpoch(9); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, f, w)
	if err := f.TruncateSuffixByEpoch(2); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, f, []Entry{{1, 0, Unbounded}})
}

func TestTruncateSuffixByOffset(t *testing.T) {
	f, dir := newList(t)
	if err := f.TruncateSuffixByOffset(301); err != nil {
		t.Fatal(err)
	}
	w := []Entry{{1, 0, 100}, {2, 100, 300}, {4, 300, Unbounded}}
	checkEntries(t, f, w)
	if err := f.TruncateSuffixByOffset(300); err != nil {
		t.Fatal(err)
	}
	w = []Entry{{1, 0, 100}, {2, 100, Unbounded}}
	checkEntries(t, f, w)
	checkEntries(t, open(t, dir), w)
}

func TestTruncatePrefixByOffset(t *testing.T) {
	f, dir := newList(t)
	if err := f.TruncatePrefixByOffset(99); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, f, []Entry{{1, 0, 100}, {2, 100, 300}, {4, 300, 600}, {5, 600, Unbounded}})
	if err := f.TruncatePrefixByOffset(300); err != nil {
		t.Fatal(err)
	}
	w := []Entry{{4, 300, 600}, {5, 600, Unbounded}}
	checkEntries(t, f, w)
	checkEntries(t, open(t, dir), w)
	// The last entry is never dropped.
	if err := f.TruncatePrefixByOffset(1 << 62); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, f, []Entry{{5, 600, Unbounded}})
}

// A truncation that changes nothing does not write.
func TestTruncateNoChangeDoesNotWrite(t *testing.T) {
	f, dir := newList(t)
	main := filepath.Join(dir, FileName)
	before, err := os.Stat(main)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{f.TruncateSuffixByEpoch(6), f.TruncateSuffixByOffset(601), f.TruncatePrefixByOffset(99)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	after, err := os.Stat(main)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Fatal("a no-op truncation rewrote the file")
	}
}

// rocketMQRead mimics CheckpointFile.read: the main file, then the backup
// when the main file is missing, unreadable or holds no entries.
func rocketMQRead(t *testing.T, dir string) []Entry {
	t.Helper()
	es, err := readFile(filepath.Join(dir, FileName))
	if err == nil && len(es) > 0 {
		return es
	}
	es, err = readFile(filepath.Join(dir, FileName+BackupSuffix))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("backup: %v", err)
	}
	return es
}

// Truncating to empty persists an empty list that reads back as empty,
// for replicator's reader and for RocketMQ's (which falls back to .bak).
func TestEmptyListPersisted(t *testing.T) {
	for _, trunc := range []struct {
		name string
		do   func(*File) error
	}{
		{"by epoch", func(f *File) error { return f.TruncateSuffixByEpoch(0) }},
		{"by offset", func(f *File) error { return f.TruncateSuffixByOffset(0) }},
	} {
		t.Run(trunc.name, func(t *testing.T) {
			f, dir := newList(t)
			if err := trunc.do(f); err != nil {
				t.Fatal(err)
			}
			if f.Len() != 0 {
				t.Fatalf("Len = %d", f.Len())
			}
			main := filepath.Join(dir, FileName)
			if got := readText(t, main); got != "0\n0\n" {
				t.Fatalf("main = %q", got)
			}
			if got := readText(t, main+BackupSuffix); got != "0\n0\n" {
				t.Fatalf("backup = %q", got)
			}
			g := open(t, dir)
			if g.Len() != 0 || g.Recovery().Source != SourceMain {
				t.Fatalf("reopened: %+v, %+v", g.Entries(), g.Recovery())
			}
			if es := rocketMQRead(t, dir); len(es) != 0 {
				t.Fatalf("RocketMQ's reader would read %+v", es)
			}
			mustAppend(t, g, 9, 0)
			checkEntries(t, open(t, dir), []Entry{{9, 0, Unbounded}})
		})
	}
}

// A valid empty main file is not a reason to read the backup (RocketMQ
// would: the quirk replicator does not keep).
func TestEmptyMainDoesNotFallBack(t *testing.T) {
	dir := t.TempDir()
	main := filepath.Join(dir, FileName)
	writeText(t, main, "0\n0\n")
	writeText(t, main+BackupSuffix, want(1, "1-0\n"))
	f := open(t, dir)
	if f.Len() != 0 || f.Recovery().Source != SourceMain {
		t.Fatalf("Entries %+v, Recovery %+v", f.Entries(), f.Recovery())
	}
}

func TestBackupFallback(t *testing.T) {
	bakText := want(2, "1-0\n2-100\n")
	bakEntries := []Entry{{1, 0, 100}, {2, 100, Unbounded}}
	cases := []struct {
		name string
		main *string
	}{
		{"zero-byte main", ptr("")},
		{"torn main", ptr("3\n12")},
		{"count mismatch", ptr(want(3, "1-0\n2-100\n"))},
		{"crc mismatch", ptr(strings.Replace(want(3, "1-0\n2-100\n3-200\n"), "3-200", "3-201", 1))},
		{"garbage", ptr("\x00\x01\x02")},
		{"missing main (crash between renames)", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			main := filepath.Join(dir, FileName)
			if c.main != nil {
				writeText(t, main, *c.main)
			}
			writeText(t, main+BackupSuffix, bakText)
			var logs bytes.Buffer
			f, err := OpenWithOptions(dir, Options{Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Trace})})
			if err != nil {
				t.Fatal(err)
			}
			checkEntries(t, f, bakEntries)
			r := f.Recovery()
			if r.Source != SourceBackup {
				t.Fatalf("Recovery = %+v", r)
			}
			if c.main == nil {
				if r.MainErr != nil || logs.Len() != 0 {
					t.Fatalf("missing main: MainErr %v, log %q", r.MainErr, logs.String())
				}
			} else {
				if !errors.Is(r.MainErr, ErrCorrupt) {
					t.Fatalf("MainErr = %v", r.MainErr)
				}
				if n := strings.Count(logs.String(), "\n"); n != 1 || !strings.Contains(logs.String(), "[WARN]") {
					t.Fatalf("want one WARN line, got %q", logs.String())
				}
			}
			// Open without options logs nothing and still recovers.
			g := open(t, dir)
			checkEntries(t, g, bakEntries)
			// The next write replaces the corrupt main without making it
			// the backup: the valid backup (the list before this write)
			// stays; the list goes on from the backup's.
			mustAppend(t, g, 3, 200)
			checkEntries(t, open(t, dir), []Entry{{1, 0, 100}, {2, 100, 200}, {3, 200, Unbounded}})
			if got := readText(t, main+BackupSuffix); got != bakText {
				t.Fatalf("backup after the write = %q, want %q", got, bakText)
			}
			// From now on the main file is valid and becomes the backup.
			mustAppend(t, g, 4, 300)
			if got, w := readText(t, main+BackupSuffix), want(3, "1-0\n2-100\n3-200\n"); got != w {
				t.Fatalf("backup after the second write = %q, want %q", got, w)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestBothCorrupt(t *testing.T) {
	dir := t.TempDir()
	main := filepath.Join(dir, FileName)
	writeText(t, main, "garbage")
	if _, err := Open(dir); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt main, no backup: %v", err)
	}
	writeText(t, main+BackupSuffix, "1\n0\n")
	if _, err := Open(dir); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("both corrupt: %v", err)
	}
	if err := os.Remove(main); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("missing main, corrupt backup: %v", err)
	}
}

// An I/O error other than a missing file is returned, not taken for
// corruption: no silent fallback to the older backup.
func TestOpenIOErrorNoFallback(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, FileName), 0o700); err != nil {
		t.Fatal(err)
	}
	writeText(t, filepath.Join(dir, FileName+BackupSuffix), want(1, "1-0\n"))
	_, err := Open(dir)
	if err == nil || errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with a directory as main file: %v", err)
	}
}

// A leftover FILE.tmp (a crash before its rename) is ignored.
func TestLeftoverTmpIgnored(t *testing.T) {
	f, dir := newList(t)
	writeText(t, filepath.Join(dir, FileName+tmpSuffix), "junk")
	checkEntries(t, open(t, dir), f.Entries())
	mustAppend(t, open(t, dir), 6, 700)
	if _, err := os.Stat(filepath.Join(dir, FileName+tmpSuffix)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("tmp after a write: %v", err)
	}
}

func TestPersistAcrossReopen(t *testing.T) {
	f, dir := newList(t)
	w := f.Entries()
	g := open(t, dir)
	checkEntries(t, g, w)
	if g.Recovery().Source != SourceMain {
		t.Fatalf("Recovery = %+v", g.Recovery())
	}
	if err := g.TruncatePrefixByOffset(100); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, g, 8, 900)
	checkEntries(t, open(t, dir), []Entry{{2, 100, 300}, {4, 300, 600}, {5, 600, 900}, {8, 900, Unbounded}})
}

// A failed write leaves the list in memory and on disk unchanged. The
// write is made to fail by a directory where FILE.tmp goes (works as root,
// unlike permissions).
func TestFailedWriteKeepsList(t *testing.T) {
	f, dir := newList(t)
	w := f.Entries()
	bakBefore := readText(t, filepath.Join(dir, FileName+BackupSuffix))
	if err := os.Mkdir(filepath.Join(dir, FileName+tmpSuffix), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := f.Append(9, 1000); err == nil || errors.Is(err, ErrNotNewer) {
		t.Fatalf("Append with an unwritable tmp: %v", err)
	}
	if err := f.TruncateSuffixByEpoch(2); err == nil {
		t.Fatal("truncate with an unwritable tmp succeeded")
	}
	if err := f.TruncateSuffixByOffset(0); err == nil {
		t.Fatal("truncate to empty with an unwritable tmp succeeded")
	}
	checkEntries(t, f, w)
	checkEntries(t, open(t, dir), w)
	if got := readText(t, filepath.Join(dir, FileName+BackupSuffix)); got != bakBefore {
		t.Fatalf("backup changed by failed writes: %q", got)
	}
	if err := os.Remove(filepath.Join(dir, FileName+tmpSuffix)); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, f, 9, 1000)
	checkEntries(t, open(t, dir), append(WithEnd(w, 1000), Entry{9, 1000, Unbounded}))
}

func TestConcurrentUse(t *testing.T) {
	f := open(t, t.TempDir())
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				ep := int32(w*100 + i + 1)
				// Appends race; a refused one is fine, a torn list is not.
				if err := f.Append(ep, int64(ep)*10); err != nil && !errors.Is(err, ErrNotNewer) {
					t.Error(err)
					return
				}
				f.Entries()
				f.FindByOffset(int64(ep))
			}
		}(w)
	}
	wg.Wait()
	es := f.Entries()
	if _, err := Decode(Encode(es)); err != nil {
		t.Fatalf("list after concurrent appends: %v", err)
	}
	checkEntries(t, open(t, filepath.Dir(f.Path())), es)
}

func TestSourceString(t *testing.T) {
	for s, w := range map[Source]string{SourceNone: "none", SourceMain: "main", SourceBackup: "backup", Source(9): "Source(9)"} {
		if s.String() != w {
			t.Fatalf("%d.String() = %q", int(s), s.String())
		}
	}
}
