package commitlog

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/plugins/commitlog/vfs"
	"github.com/replicatorhq/replicator/plugins/commitlog/vfs/errorfs"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// crashChildEnv makes TestAllocCrashChild run (in a re-executed test
// binary): "dir,segment size,kill point,occurrence,preallocate".
const crashChildEnv = "REPLICATOR_COMMITLOG_CRASH_CHILD"

const (
	crashSeg     = 16 << 10
	crashRecords = 100
)

// crashMsg is the i-th message the child appends; about 15 fit a segment.
func crashMsg(i int) *record.Message { return testMsg("CRASH", int32(i%4), 900+i%200, int64(i)) }

// segmentFile selects operations on segment files (a spare has its
// suffix), not on the checkpoint or the abort file.
var segmentFile = errorfs.PathFunc(func(path string) bool {
	_, ok := store.ParseSegmentName(strings.TrimSuffix(filepath.Base(path), spareSuffix))
	return ok
})

// existing selects operations on a path that exists (a Remove that will
// remove something).
var existing = errorfs.PathFunc(func(path string) bool {
	_, err := os.Stat(path)
	return err == nil
})

// killPoints are the steps of creating (and dropping) a segment file at
// which TestCommitLogAllocCrash kills the child: a kill at any of them
// must leave DATA/commitlog holding only whole segment files.
var killPoints = []struct {
	name  string
	match errorfs.Predicate
}{
	{"before-create", errorfs.And(errorfs.Kinds(errorfs.OpCreate), segmentFile)},      // the previous segment joined the log and took appends
	{"created", errorfs.And(errorfs.AfterKinds(errorfs.OpCreate), segmentFile)},       // empty file in the allocation directory
	{"sized", errorfs.And(errorfs.AfterKinds(errorfs.OpAllocate), segmentFile)},       // fallocated to full length
	{"mapped", errorfs.And(errorfs.AfterKinds(errorfs.OpMap), segmentFile)},           // mapped, not yet renamed in
	{"installed", errorfs.And(errorfs.AfterKinds(errorfs.OpRename), segmentFile)},     // renamed into DATA/commitlog
	{"dropping", errorfs.And(errorfs.Kinds(errorfs.OpRemove), segmentFile, existing)}, // an unused spare about to be removed
}

// TestAllocCrashChild is the child of TestCommitLogAllocCrash: it appends
// crashMsg(0), crashMsg(1), ... printing "acked i" after each, then
// closes the log, and SIGKILLs itself at the given occurrence of the
// given kill point (an operation of its file system, errorfs).
func TestAllocCrashChild(t *testing.T) {
	spec := os.Getenv(crashChildEnv)
	if spec == "" {
		t.Skip("run by TestCommitLogAllocCrash")
	}
	f := strings.Split(spec, ",")
	if len(f) != 5 {
		t.Fatalf("%s=%q", crashChildEnv, spec)
	}
	seg, _ := strconv.ParseInt(f[1], 10, 64)
	occ, _ := strconv.Atoi(f[3])
	var match errorfs.Predicate
	for _, kp := range killPoints {
		if kp.name == f[2] {
			match = kp.match
		}
	}
	if match == nil {
		t.Fatalf("no kill point %q", f[2])
	}
	o := testOptions(t, seg)
	o.Preallocate = f[4] == "true"
	var n atomic.Int64
	o.FS = errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if match(op) && n.Add(1) == int64(occ) {
			killSelf()
			select {} // the signal is on its way
		}
		return nil
	}))
	l := mustOpen(t, f[0], o)
	for i := range crashRecords {
		mustAppend(t, l, crashMsg(i))
		fmt.Printf("acked %d\n", i)
	}
	if f[2] == "dropping" {
		// Close drops the spare: wait for the allocator to publish one
		// (a background goroutine on a loaded machine).
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
			l.mu.Lock()
			ready := l.spare != nil
			l.mu.Unlock()
			if ready {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no spare was preallocated")
			}
		}
	}
	mustClose(t, l)
}

// checkLoadable fails unless dir holds only what a RocketMQ 4.9 broker's
// MappedFileQueue.load accepts: regular files whose names parse as
// offsets (MappedFile reads Long.parseLong(name); replicator writes 20
// digits) and whose length is the segment size. It returns the starts.
func checkLoadable(t *testing.T, dir string, seg int64) []int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var starts []int64
	for _, e := range ents {
		start, ok := store.ParseSegmentName(e.Name())
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if !ok || !fi.Mode().IsRegular() || fi.Size() != seg {
			t.Fatalf("%s holds %s (%v, %d bytes): not a %d-byte segment file, a RocketMQ broker would refuse to load it", dir, e.Name(), fi.Mode(), fi.Size(), seg)
		}
		starts = append(starts, start)
	}
	return starts
}

// TestCommitLogAllocCrash kills (SIGKILL) a child process at every step
// of creating a segment file (killPoints: first creation and a later one;
// with the background allocator and without; and while dropping the spare
// at close), then checks that DATA/commitlog holds only whole segment files
// and that the log recovers every acknowledged record, a prefix of what
// was appended, and goes on.
func TestCommitLogAllocCrash(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("in the child")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	type tc struct {
		step     string
		occ      int
		prealloc bool
	}
	var cases []tc
	for _, prealloc := range []bool{true, false} {
		for _, kp := range killPoints[:len(killPoints)-1] {
			for _, occ := range []int{1, 3} {
				cases = append(cases, tc{kp.name, occ, prealloc})
			}
		}
	}
	cases = append(cases, tc{"dropping", 1, true})
	for _, c := range cases {
		t.Run(fmt.Sprintf("prealloc=%v/%v/%d", c.prealloc, c.step, c.occ), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(exe, "-test.run=^TestAllocCrashChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d,%s,%d,%v", crashChildEnv, dir, crashSeg, c.step, c.occ, c.prealloc))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("the child was not killed at %v #%d: %v\n%s%s", c.step, c.occ, err, out, stderr.Bytes())
			}
			if !killedHard(ee) {
				t.Fatalf("the child ended with %v, not SIGKILL at %v #%d\n%s%s", err, c.step, c.occ, out, stderr.Bytes())
			}
			acked := 0
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				if _, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
					acked++
				}
			}

			segDir := filepath.Join(dir, "commitlog")
			checkLoadable(t, segDir, crashSeg)

			o := testOptions(t, crashSeg)
			o.Preallocate = c.prealloc
			l := mustOpen(t, dir, o)
			recs := readAll(t, l)
			if len(recs) < acked {
				t.Fatalf("recovered %d records, %d were acknowledged", len(recs), acked)
			}
			for i, r := range recs {
				if w := crashMsg(i); !bytes.Equal(r.Body, w.Body) || r.QueueID != w.QueueID {
					t.Fatalf("record %d at %d is not message %d: not a prefix", i, r.PhysicalOffset, i)
				}
			}
			// The recovered log goes on: appends across rolls, a clean
			// close, and everything again after reopening.
			for i := len(recs); i < len(recs)+40; i++ {
				if _, err := l.Append(context.Background(), crashMsg(i)); err != nil {
					t.Fatalf("append %d after recovery: %v", i, err)
				}
			}
			mustClose(t, l)
			checkLoadable(t, segDir, crashSeg)
			if _, err := os.Stat(filepath.Join(dir, allocDirName)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the allocation directory outlives a clean close: %v", err)
			}
			l = mustOpen(t, dir, o)
			if got := len(readAll(t, l)); got != len(recs)+40 {
				t.Fatalf("after reopening: %d records, want %d", got, len(recs)+40)
			}
			mustClose(t, l)
		})
	}
}

// TestCommitLogSegmentsOnlyWhileRunning: while a log runs and its spare
// is being preallocated (the allocator held in its file system right
// after mapping the spare, whole), DATA/commitlog holds only the log's segments
// (the spare is in the allocation directory), and a copy taken then (a
// crash) recovers every record.
func TestCommitLogSegmentsOnlyWhileRunning(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(t, crashSeg)
	ready, resume := make(chan string), make(chan struct{})
	var once atomic.Bool
	o.FS = errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpMap && op.After && strings.HasSuffix(op.Path, spareSuffix) && once.CompareAndSwap(false, true) {
			ready <- op.Path
			<-resume
		}
		return nil
	}))
	l := mustOpen(t, dir, o)
	defer mustClose(t, l)
	for i := range 40 {
		mustAppend(t, l, crashMsg(i))
	}
	var spare string
	select {
	case spare = <-ready:
	case <-time.After(20 * time.Second):
		t.Fatal("no spare was preallocated")
	}
	defer close(resume)
	if filepath.Dir(spare) != filepath.Join(dir, allocDirName) {
		t.Fatalf("the spare is %s, not in %s", spare, allocDirName)
	}
	if fi, err := os.Stat(spare); err != nil || fi.Size() != crashSeg {
		t.Fatalf("the spare: %v, %v", fi, err)
	}
	starts := checkLoadable(t, filepath.Join(dir, "commitlog"), crashSeg)
	segs := l.segList()
	if len(starts) != len(segs) || starts[len(starts)-1] != segs[len(segs)-1].start {
		t.Fatalf("DATA/commitlog holds segments %v, the log %d from %d", starts, len(segs), segs[0].start)
	}
	img := copyDir(t, dir)
	c := mustOpen(t, img, o)
	if got := len(readAll(t, c)); got != 40 {
		t.Fatalf("the copy recovers %d records, want 40", got)
	}
	mustClose(t, c)
	if ents, err := os.ReadDir(filepath.Join(img, allocDirName)); err == nil && len(ents) > 0 {
		t.Fatalf("the copy's allocation directory still holds %v", ents)
	}
}

// TestCommitLogAllocOtherFileSystem: with DATA/commitlog on another file
// system than DATA (here a symlink into /dev/shm), no rename can move a
// file between them: segments are created in place without a spare, and
// the log works and recovers.
func TestCommitLogAllocOtherFileSystem(t *testing.T) {
	shm, err := os.MkdirTemp("/dev/shm", "commitlog-test")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	dir := t.TempDir()
	if same, err := sameFileSystem(vfs.Default, shm, dir); err != nil || same {
		t.Skipf("/dev/shm is not another file system here (%v)", err)
	}
	if err := os.Symlink(shm, filepath.Join(dir, "commitlog")); err != nil {
		t.Fatal(err)
	}
	o := testOptions(t, crashSeg)
	l := mustOpen(t, dir, o)
	if !l.inPlace() {
		t.Fatalf("allocation directory %s used across file systems", l.allocDir)
	}
	if _, err := os.Stat(filepath.Join(dir, allocDirName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("allocation directory: %v", err)
	}
	for i := range 60 {
		mustAppend(t, l, crashMsg(i))
	}
	checkLoadable(t, shm, crashSeg)
	mustClose(t, l)
	l = mustOpen(t, dir, o)
	if got := len(readAll(t, l)); got != 60 {
		t.Fatalf("%d records after reopening, want 60", got)
	}
	mustClose(t, l)
}
