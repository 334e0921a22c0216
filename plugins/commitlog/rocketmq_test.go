package commitlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// The fixture testdata/rocketmq-4.9-store is a store root as a RocketMQ
// 4.9 broker leaves it after a crash, with small files (a broker run with
// mappedFileSizeCommitLog=4096, mappedFileSizeConsumeQueue=1280,
// maxHashSlotNum=16, maxIndexNum=32): commitlog/ with a full segment
// (records and the end-of-file filler), a partly written one and the
// zero-filled next segment that AllocateMappedFileService had
// preallocated; consumequeue/<topic>/<queue>/ with 20-byte entries;
// index/<yyyyMMddHHmmssSSS> with KEYS entries; config/, lock, the empty
// abort file of a crashed broker and its 4 KiB checkpoint. It is written
// by writeBrokerStore (records made with sdk/record), and
// TestRocketMQFixtureUpToDate checks the committed files against it;
// REPLICATOR_UPDATE_FIXTURE=1 rewrites them.
const (
	fixtureDir     = "testdata/rocketmq-4.9-store"
	fixtureSeg     = 4096
	fixtureCQFile  = 64 * 20
	fixtureSlots   = 16
	fixtureIndexes = 32
	fixtureBaseTS  = int64(1764690300000) // 2025-12-02T15:45:00Z, Unix ms
	fixtureRecords = 17
)

// fixtureMsg is the i-th message the fixture's broker stored.
func fixtureMsg(i int) *record.Message {
	topic, qid := "TopicTest", int32(i%2)
	if i%5 == 4 {
		topic, qid = "%RETRY%please_rename_unique_group_name", 0
	}
	return &record.Message{
		Topic:   topic,
		QueueID: qid,
		Body:    fmt.Appendf(nil, "Hello RocketMQ %d %s", i, strings.Repeat("x", 100+i*7)),
		Properties: map[string]string{
			"KEYS": fmt.Sprintf("key%d", i), "TAGS": []string{"TagA", "TagB"}[i%2],
			"UNIQ_KEY": fmt.Sprintf("7F0000010B6418B4AAC2%012X", i), "WAIT": "true",
		},
		BornTimestamp: fixtureBaseTS + int64(i)*10 - 3,
		BornHost:      netip.MustParseAddrPort("10.0.0.5:50318"),
		StoreHost:     netip.MustParseAddrPort("10.0.0.1:10911"),
	}
}

// javaHash is java.lang.String.hashCode of an ASCII string.
func javaHash(s string) int32 {
	var h int32
	for i := 0; i < len(s); i++ {
		h = 31*h + int32(s[i])
	}
	return h
}

type fixtureRecord struct {
	msg              *record.Message
	off, qo, storeTS int64
	size             int
}

// fixtureLayout places the fixture's records as a broker's CommitLog
// does: queue offsets per queue, the filler when a record plus 8 bytes
// does not fit the rest of the segment.
func fixtureLayout(t testing.TB) (recs []fixtureRecord, end int64) {
	t.Helper()
	queues := map[string]int64{}
	for i := range fixtureRecords {
		m := fixtureMsg(i)
		size, err := record.Size(m)
		if err != nil {
			t.Fatal(err)
		}
		if rest := fixtureSeg - end%fixtureSeg; int64(size)+record.FillerSize > rest {
			end += rest
		}
		k := fmt.Sprint(m.Topic, "/", m.QueueID)
		recs = append(recs, fixtureRecord{msg: m, off: end, qo: queues[k], storeTS: fixtureBaseTS + int64(i)*10, size: size})
		queues[k]++
		end += int64(size)
	}
	return recs, end
}

// writeBrokerStore writes the fixture store root into root.
func writeBrokerStore(t testing.TB, root string) {
	t.Helper()
	write := func(rel string, b []byte) {
		t.Helper()
		path := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	recs, end := fixtureLayout(t)
	segs := make([][]byte, end/fixtureSeg+2) // the last: preallocated, zeros
	for i := range segs {
		segs[i] = make([]byte, fixtureSeg)
	}
	pos := int64(0)
	for _, r := range recs {
		if r.off != pos {
			record.PutFiller(segs[pos/fixtureSeg][pos%fixtureSeg:], int32(r.off-pos))
		}
		if _, err := record.Encode(segs[r.off/fixtureSeg][r.off%fixtureSeg:r.off%fixtureSeg], r.msg, r.qo, r.off, r.storeTS); err != nil {
			t.Fatal(err)
		}
		pos = r.off + int64(r.size)
	}
	for i, b := range segs {
		write(filepath.Join("commitlog", store.SegmentName(int64(i)*fixtureSeg)), b)
	}

	// Consume queues: [8 physical offset][4 size][8 tags hash code].
	be := binary.BigEndian
	cq := map[string][]byte{}
	for _, r := range recs {
		k := filepath.Join("consumequeue", r.msg.Topic, fmt.Sprint(r.msg.QueueID), store.SegmentName(0))
		if cq[k] == nil {
			cq[k] = make([]byte, 0, fixtureCQFile)
		}
		b := be.AppendUint64(cq[k], uint64(r.off))
		b = be.AppendUint32(b, uint32(r.size))
		cq[k] = be.AppendUint64(b, uint64(int64(javaHash(r.msg.Properties["TAGS"]))))
	}
	for k, b := range cq {
		write(k, b[:fixtureCQFile])
	}

	// Index file: 40-byte header, hash slots, entries (index 0 unused).
	idx := make([]byte, 40+fixtureSlots*4+fixtureIndexes*20)
	count, slotsUsed := int32(1), int32(0)
	for _, r := range recs {
		key := r.msg.Topic + "#" + r.msg.Properties["KEYS"]
		h := javaHash(key)
		if h < 0 {
			h = -h
		}
		slot := 40 + int(h%fixtureSlots)*4
		prev := int32(be.Uint32(idx[slot:]))
		if prev == 0 {
			slotsUsed++
		}
		e := idx[40+fixtureSlots*4+int(count)*20:]
		be.PutUint32(e, uint32(h))
		be.PutUint64(e[4:], uint64(r.off))
		be.PutUint32(e[12:], uint32((r.storeTS-recs[0].storeTS)/1000))
		be.PutUint32(e[16:], uint32(prev))
		be.PutUint32(idx[slot:], uint32(count))
		count++
	}
	last := recs[len(recs)-1]
	be.PutUint64(idx[0:], uint64(recs[0].storeTS))
	be.PutUint64(idx[8:], uint64(last.storeTS))
	be.PutUint64(idx[16:], uint64(recs[0].off))
	be.PutUint64(idx[24:], uint64(last.off))
	be.PutUint32(idx[32:], uint32(slotsUsed))
	be.PutUint32(idx[36:], uint32(count))
	write(filepath.Join("index", time.UnixMilli(recs[0].storeTS).UTC().Format("20060102150405.000")[:14]+
		fmt.Sprintf("%03d", recs[0].storeTS%1000)), idx)

	// StoreCheckpoint: one page, physicMsgTimestamp, logicsMsgTimestamp,
	// indexMsgTimestamp (as of the broker's last flush, before the crash).
	ck := make([]byte, 4096)
	be.PutUint64(ck[0:], uint64(recs[12].storeTS))
	be.PutUint64(ck[8:], uint64(recs[12].storeTS))
	be.PutUint64(ck[16:], uint64(recs[12].storeTS))
	write("checkpoint", ck)
	write("abort", nil)
	write("lock", []byte("lock"))
	write("config/topics.json", []byte(`{"dataVersion":{"counter":1,"timestamp":1764690299000},"topicConfigTable":{"TopicTest":{"order":false,"perm":6,"readQueueNums":2,"topicFilterType":"SINGLE_TAG","topicName":"TopicTest","topicSysFlag":0,"writeQueueNums":2}}}`+"\n"))
	write("config/consumerOffset.json", []byte(`{"offsetTable":{}}`+"\n"))
}

// readTree returns every file under root by relative path.
func readTree(t testing.TB, root string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.Walk(root, func(path string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		b, err := os.ReadFile(path)
		out[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRocketMQFixtureUpToDate(t *testing.T) {
	if os.Getenv("REPLICATOR_UPDATE_FIXTURE") == "1" {
		if err := os.RemoveAll(fixtureDir); err != nil {
			t.Fatal(err)
		}
		writeBrokerStore(t, fixtureDir)
	}
	want := t.TempDir()
	writeBrokerStore(t, want)
	got, exp := readTree(t, fixtureDir), readTree(t, want)
	for rel, b := range exp {
		if !bytes.Equal(got[rel], b) {
			t.Errorf("%s/%s differs from what writeBrokerStore writes (REPLICATOR_UPDATE_FIXTURE=1 rewrites it)", fixtureDir, rel)
		}
	}
	for rel := range got {
		if _, ok := exp[rel]; !ok {
			t.Errorf("%s/%s is not part of the fixture", fixtureDir, rel)
		}
	}
}

// copyTree copies the fixture into a fresh directory (Open changes it).
func copyTree(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	for rel, b := range readTree(t, src) {
		path := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestOpenRocketMQStore opens the store root of a crashed RocketMQ 4.9
// broker: the records read back as the broker wrote them, the
// preallocated zero-filled segment is not data, the queue table goes on
// from the broker's queue offsets, and the broker's own files
// (checkpoint, abort, lock, config/, consumequeue/, index/) are neither
// misread nor changed.
func TestOpenRocketMQStore(t *testing.T) {
	dir := copyTree(t, fixtureDir)
	before := readTree(t, dir)
	recs, end := fixtureLayout(t)
	l := mustOpen(t, dir, testOptions(t, fixtureSeg))
	if b := l.Bounds(); b.Min != 0 || b.Max != end {
		t.Fatalf("bounds %+v, want [0, %d)", b, end)
	}
	got := readAll(t, l)
	if len(got) != len(recs) {
		t.Fatalf("read %d records, the broker wrote %d", len(got), len(recs))
	}
	for i, r := range got {
		w := recs[i]
		if r.PhysicalOffset != w.off || r.QueueOffset != w.qo || r.StoreTimestamp != w.storeTS || r.Topic != w.msg.Topic ||
			r.QueueID != w.msg.QueueID || !bytes.Equal(r.Body, w.msg.Body) || r.Properties["KEYS"] != w.msg.Properties["KEYS"] ||
			r.StoreHost != w.msg.StoreHost {
			t.Fatalf("record %d: %+v, the broker wrote %+v", i, r, w)
		}
	}
	res, err := l.Append(context.Background(), &record.Message{Topic: "TopicTest", QueueID: 1, Body: []byte("after the broker")})
	if err != nil {
		t.Fatal(err)
	}
	wantQO := int64(0)
	for _, w := range recs {
		if w.msg.Topic == "TopicTest" && w.msg.QueueID == 1 {
			wantQO = w.qo + 1
		}
	}
	if res.Offset != end || res.QueueOffset != wantQO {
		t.Fatalf("append after the broker's records: offset %d queue offset %d, want %d and %d", res.Offset, res.QueueOffset, end, wantQO)
	}
	mustClose(t, l)

	after := readTree(t, dir)
	for rel, b := range before {
		if strings.HasPrefix(rel, "commitlog"+string(filepath.Separator)) {
			continue
		}
		if a, ok := after[rel]; !ok || !bytes.Equal(a, b) {
			t.Errorf("the broker's %s was changed or removed", rel)
		}
	}
	for rel := range after {
		if _, ok := before[rel]; !ok && rel != checkpointName && !strings.HasPrefix(rel, "commitlog"+string(filepath.Separator)) {
			t.Errorf("replicator left %s in the broker's store root", rel)
		}
	}
	starts := checkLoadable(t, filepath.Join(dir, "commitlog"), fixtureSeg)
	if want := end / fixtureSeg; int64(len(starts)) != want+1 {
		t.Fatalf("segments %v after the append, want %d", starts, want+1)
	}
	l = mustOpen(t, dir, testOptions(t, fixtureSeg))
	if got := readAll(t, l); len(got) != len(recs)+1 {
		t.Fatalf("after reopening: %d records, want %d", len(got), len(recs)+1)
	}
	mustClose(t, l)
}

// TestBrokerCanOpenReplicatorStore checks replicator's store root against
// what a RocketMQ 4.9 broker needs to open it: only whole segment files
// in commitlog/, at every moment (running, a crash image, closed); an
// abort file while open and after a crash (the broker then recovers it
// as abnormally shut down) and none after a clean close; and no file
// named checkpoint, which the broker would read as its StoreCheckpoint.
func TestBrokerCanOpenReplicatorStore(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(t, fixtureSeg)
	l := mustOpen(t, dir, o)
	for i := range 30 {
		mustAppend(t, l, fixtureMsg(i))
	}
	abort := filepath.Join(dir, abortName)
	if b, err := os.ReadFile(abort); err != nil || !bytes.Equal(b, abortMark) {
		t.Fatalf("abort while open: %q, %v", b, err)
	}
	checkLoadable(t, filepath.Join(dir, "commitlog"), fixtureSeg)
	crash := copyDir(t, dir)
	mustClose(t, l)

	if _, err := os.Stat(abort); !os.IsNotExist(err) {
		t.Fatalf("abort after a clean close: %v", err)
	}
	for _, d := range []string{dir, crash} {
		checkLoadable(t, filepath.Join(d, "commitlog"), fixtureSeg)
		if _, err := os.Stat(filepath.Join(d, brokerCkptName)); !os.IsNotExist(err) {
			t.Fatalf("%s: replicator wrote a %s file: %v", d, brokerCkptName, err)
		}
	}
	if _, err := os.Stat(filepath.Join(crash, abortName)); err != nil {
		t.Fatalf("a crash image has no abort file: %v", err)
	}
	// The crashed store recovers, and its next clean close removes the
	// abort file it left.
	l = mustOpen(t, crash, o)
	if got := len(readAll(t, l)); got != 30 {
		t.Fatalf("the crash image holds %d records, want 30", got)
	}
	mustClose(t, l)
	if _, err := os.Stat(filepath.Join(crash, abortName)); !os.IsNotExist(err) {
		t.Fatalf("abort after recovering and closing: %v", err)
	}
}

// TestBrokerRanAfterReplicator: a broker that appends to a directory
// after replicator closed it cleanly makes replicator's checkpoint stale
// (its clean end is below the broker's records). Replicator notices (the
// broker's checkpoint or abort file is newer) and keeps the broker's
// records instead of cutting them as written past a clean end.
func TestBrokerRanAfterReplicator(t *testing.T) {
	for _, how := range []string{"clean", "crash"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			o := testOptions(t, fixtureSeg)
			l := mustOpen(t, dir, o)
			for i := range 5 {
				mustAppend(t, l, fixtureMsg(i))
			}
			end := l.Bounds().Max
			mustClose(t, l)

			// The broker appends one record and flushes its checkpoint
			// (clean) or crashes, leaving its empty abort file.
			m := fixtureMsg(5)
			patchSegment(t, dir, fixtureSeg, end, func(b []byte, pos int64) {
				if _, err := record.Encode(b[pos:pos], m, 99, end, fixtureBaseTS+99); err != nil {
					t.Fatal(err)
				}
			})
			name := brokerCkptName
			if how == "crash" {
				name = abortName
			}
			if err := os.WriteFile(filepath.Join(dir, name), make([]byte, map[string]int{"clean": 4096, "crash": 0}[how]), 0o644); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(filepath.Join(dir, checkpointName))
			if err != nil {
				t.Fatal(err)
			}
			later := fi.ModTime().Add(time.Second)
			if err := os.Chtimes(filepath.Join(dir, name), later, later); err != nil {
				t.Fatal(err)
			}

			l = mustOpen(t, dir, o)
			recs := readAll(t, l)
			if len(recs) != 6 || !bytes.Equal(recs[5].Body, m.Body) {
				t.Fatalf("after the broker's append: %d records, want 6 with the broker's last", len(recs))
			}
			mustClose(t, l)
			if _, err := os.Stat(filepath.Join(dir, abortName)); (err == nil) != (how == "crash") {
				t.Fatalf("the broker's abort file after replicator's clean close: %v (kept only when the broker left one)", err)
			}
		})
	}
}
