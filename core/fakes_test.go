package core

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/sdk/store/memstore"
	"github.com/replicatorhq/replicator/transport/memtransport"
)

// memStore is the SDK's in-memory store (sdk/store/memstore: real
// records, commitlog's offset rules) with the helpers core's tests use and
// one fault: flushErr, returned (with a valid result) by Append when set.
type memStore struct {
	*memstore.Store
	flushErr    error
	queueOffset int64  // the next record's, for fillRecords
	topic       string // fillRecords' topic; "" is TopicTest
}

var _ store.Store = (*memStore)(nil)

func newMemStore(segSize int64) *memStore {
	return &memStore{Store: memstore.New(segSize)}
}

func (s *memStore) Append(ctx context.Context, msg *record.Message) (store.AppendResult, error) {
	res, err := s.Store.Append(ctx, msg)
	if err == nil && s.flushErr != nil {
		return res, s.flushErr
	}
	return res, err
}

// bytesAt returns a copy of the stored bytes [from, to).
func (s *memStore) bytesAt(from, to int64) []byte {
	out := make([]byte, 0, to-from)
	for off := from; off < to; {
		v, err := s.Read(off, int(to-off))
		if err != nil || len(v.Data) == 0 {
			panic(fmt.Sprintf("memStore.bytesAt(%d, %d): at %d: %d bytes, %v", from, to, off, len(v.Data), err))
		}
		out = append(out, v.Data...)
		off += int64(len(v.Data))
		v.Release()
	}
	return out
}

// put appends data at start (the max offset, or a segment boundary on an
// empty store) in pieces that never cross a segment end.
func (s *memStore) put(t testing.TB, start int64, data []byte) {
	t.Helper()
	seg := s.Bounds().SegmentSize
	for off := start; len(data) > 0; {
		n := min(int64(len(data)), seg-off%seg)
		if _, err := s.AppendAt(off, data[:n]); err != nil {
			t.Fatal(err)
		}
		off, data = off+n, data[n:]
	}
}

// fill appends raw bytes to s as a master log: pattern bytes from offset
// start (on an empty store: a segment boundary) up to end.
func (s *memStore) fill(t testing.TB, start, end int64) {
	t.Helper()
	s.put(t, start, pattern(start, int(end-start)))
}

// fillRecords appends real records to s from offset start (on an empty
// store: a segment boundary) up to end, with a record boundary at each of
// cuts (and at every segment end: a filler, or zeros when fewer than
// record.FillerSize bytes are left). A gap shorter than the smallest
// record between two boundaries fails the test.
func (s *memStore) fillRecords(t testing.TB, start, end int64, cuts ...int64) {
	t.Helper()
	seg := s.Bounds().SegmentSize
	points := []int64{end}
	for _, c := range cuts {
		if c > start && c < end {
			points = append(points, c)
		}
	}
	for e := (start/seg + 1) * seg; e < end; e += seg {
		points = append(points, e)
	}
	slices.Sort(points)
	points = slices.Compact(points)
	topic := cmp.Or(s.topic, "TopicTest")
	empty, err := record.Size(&record.Message{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	off := start
	for _, p := range points {
		gap := p - off
		if gap < int64(empty) {
			if p%seg != 0 {
				t.Fatalf("fillRecords: %d bytes between %d and %d hold no record", gap, off, p)
			}
			pad := make([]byte, gap)
			if gap >= record.FillerSize {
				record.PutFiller(pad, int32(gap))
			}
			s.put(t, off, pad)
			off = p
			continue
		}
		k := (gap + 399) / 400 // records of at most 400 bytes
		for i := range k {
			size := gap / k
			if i == k-1 {
				size = p - off
			}
			m := &record.Message{Topic: topic, Body: pattern(off, int(size)-empty)}
			b, err := record.Encode(nil, m, s.queueOffset, off, 1_700_000_000_000)
			if err != nil {
				t.Fatal(err)
			}
			s.queueOffset++
			s.put(t, off, b)
			off += size
		}
	}
}

// pattern is deterministic content for offset off: byte i is a function of
// its offset, so misplaced bytes show.
func pattern(off int64, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		o := off + int64(i)
		b[i] = byte(o ^ o>>8 ^ o>>16)
	}
	return b
}

// pipeTransport is memtransport's Transport, the name core's tests give
// it: one node that listens and dials (a master and its slaves in one
// test share it). Tests that inject faults use a memtransport.Network of
// their own and its links.
type pipeTransport = memtransport.Transport

func newPipeTransport() *pipeTransport {
	return memtransport.NewNetwork(memtransport.Config{}).Transport("node")
}

// logBuf is a concurrency-safe log sink for assertions on log lines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
	t  testing.TB
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return l.b.Write(p)
}

// count returns how many log lines contain s.
func (l *logBuf) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

func newTestLogger(t testing.TB) (hclog.Logger, *logBuf) {
	lb := &logBuf{t: t}
	return hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Debug, Output: lb, DisableTime: true}), lb
}

// rawReport writes one 8-byte report.
func rawReport(t testing.TB, c net.Conn, v int64) {
	t.Helper()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(v))
	if _, err := c.Write(b[:]); err != nil {
		t.Fatalf("write report %d: %v", v, err)
	}
}

// rawFrame reads one frame from c byte by byte (no transport code).
func rawFrame(t testing.TB, c net.Conn) (int64, []byte) {
	t.Helper()
	var h [12]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		t.Fatalf("read frame header: %v", err)
	}
	off := int64(binary.BigEndian.Uint64(h[:8]))
	size := int32(binary.BigEndian.Uint32(h[8:]))
	if size < 0 || size > 4<<20 {
		t.Fatalf("frame size %d", size)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatalf("read frame body: %v", err)
	}
	return off, body
}

// encodeFrame is a frame's bytes, built by hand.
func encodeFrame(off int64, body []byte) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(off))
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	return append(b, body...)
}

// readReport reads one 8-byte report.
func readReport(t testing.TB, c net.Conn) int64 {
	t.Helper()
	var b [8]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("read report: %v", err)
	}
	return int64(binary.BigEndian.Uint64(b[:]))
}

// testMsg is a message with an n-byte body.
func testMsg(n int) *record.Message {
	return &record.Message{Topic: "TopicTest", Body: bytes.Repeat([]byte{'m'}, n)}
}

// sizedMsg is a message whose record is exactly size bytes (at least
// recordSize(testMsg(0)), a TopicTest record with an empty body).
func sizedMsg(t testing.TB, size int) *record.Message {
	t.Helper()
	empty := int(recordSize(t, testMsg(0)))
	if size < empty {
		t.Fatalf("sizedMsg(%d): the smallest record is %d bytes", size, empty)
	}
	return testMsg(size - empty)
}

// recordSize is the size of msg's record.
func recordSize(t testing.TB, msg *record.Message) int64 {
	t.Helper()
	n, err := record.Size(msg)
	if err != nil {
		t.Fatal(err)
	}
	return int64(n)
}
