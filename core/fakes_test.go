package core

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
)

// memStore is an in-memory store.Store with fixed-size segments, for
// deterministic byte-level tests (the commitlog plugin is tested over TCP).
// Append encodes a record as [int32 size][body] and pads the rest of a
// segment with zeros when the record does not fit.
type memStore struct {
	mu       sync.Mutex
	segSize  int64
	base     int64 // first offset held
	data     []byte
	empty    bool
	watchers map[int]chan<- struct{}
	nextW    int
	flushErr error // returned (with a valid result) by Append when set
	closed   bool
}

var _ store.Store = (*memStore)(nil)

func newMemStore(segSize int64) *memStore {
	return &memStore{segSize: segSize, empty: true, watchers: map[int]chan<- struct{}{}}
}

func (s *memStore) maxLocked() int64 { return s.base + int64(len(s.data)) }

func (s *memStore) notifyLocked() {
	for _, ch := range s.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (s *memStore) Append(ctx context.Context, msg *record.Message) (store.AppendResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.AppendResult{}, store.ErrClosed
	}
	size := int64(4 + len(msg.Body))
	if size > s.segSize {
		return store.AppendResult{}, store.ErrMessageTooLarge
	}
	s.empty = false
	off := s.maxLocked()
	if rem := s.segSize - off%s.segSize; rem < size {
		s.data = append(s.data, make([]byte, rem)...)
		off += rem
	}
	s.data = binary.BigEndian.AppendUint32(s.data, uint32(size))
	s.data = append(s.data, msg.Body...)
	s.notifyLocked()
	res := store.AppendResult{Offset: off, NextOffset: off + size, Size: int32(size)}
	return res, s.flushErr
}

func (s *memStore) AppendAt(offset int64, data []byte) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, store.ErrClosed
	}
	if s.empty {
		s.base = offset
	} else if offset != s.maxLocked() {
		return 0, fmt.Errorf("memstore: append at %d, max %d: %w", offset, s.maxLocked(), store.ErrOffsetMismatch)
	}
	if offset%s.segSize+int64(len(data)) > s.segSize {
		return 0, fmt.Errorf("memstore: append [%d,+%d): %w", offset, len(data), store.ErrSegmentOverflow)
	}
	s.empty = false
	s.data = append(s.data, data...)
	s.notifyLocked()
	return s.maxLocked(), nil
}

func (s *memStore) Read(offset int64, max int) (store.View, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.View{}, store.ErrClosed
	}
	if offset < s.base || offset > s.maxLocked() {
		return store.View{}, fmt.Errorf("memstore: read at %d: %w", offset, store.ErrOffsetOutOfRange)
	}
	end := min(offset+int64(max), (offset/s.segSize+1)*s.segSize, s.maxLocked())
	return store.View{Offset: offset, Data: s.data[offset-s.base : end-s.base : end-s.base]}, nil
}

func (s *memStore) ReadMessages(offset int64, n int) ([]record.Record, int64, error) {
	return nil, offset, errors.New("memstore: ReadMessages not supported")
}

func (s *memStore) Bounds() store.Bounds {
	s.mu.Lock()
	defer s.mu.Unlock()
	max := s.maxLocked()
	last := s.base / s.segSize * s.segSize
	if max > s.base {
		last = (max - 1) / s.segSize * s.segSize // the segment holding the last byte
	}
	return store.Bounds{Min: s.base, Max: max, Flushed: max, LastSegmentStart: last, SegmentSize: s.segSize}
}

func (s *memStore) Truncate(offset int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if offset < s.base || offset > s.maxLocked() {
		return store.ErrOffsetOutOfRange
	}
	s.data = s.data[:offset-s.base]
	s.notifyLocked()
	return nil
}

func (s *memStore) Watch(ch chan<- struct{}) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.nextW
	s.nextW++
	s.watchers[id] = ch
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.watchers, id)
	}
}

func (s *memStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// bytesAt returns a copy of the stored bytes [from, to).
func (s *memStore) bytesAt(from, to int64) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.data[from-s.base : to-s.base])
}

// fill appends raw bytes to s as a master log: pattern bytes from offset
// start (on an empty store) up to end.
func (s *memStore) fill(t testing.TB, start, end int64) {
	t.Helper()
	for off := start; off < end; {
		n := min(end-off, s.segSize-off%s.segSize)
		if _, err := s.AppendAt(off, pattern(off, int(n))); err != nil {
			t.Fatal(err)
		}
		off += n
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

// pipeTransport is an in-memory transport.Transport built on net.Pipe: it
// works inside testing/synctest bubbles.
type pipeTransport struct {
	mu        sync.Mutex
	listeners map[string]*pipeListener
	n         int
	// wrap, if set, wraps both ends of every new connection (fault
	// injection); dialer is true for the dialing side.
	wrap func(c net.Conn, dialer bool) net.Conn
}

func newPipeTransport() *pipeTransport {
	return &pipeTransport{listeners: map[string]*pipeListener{}}
}

type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }

type pipeListener struct {
	tr     *pipeTransport
	addr   string
	ch     chan net.Conn
	done   chan struct{}
	closed sync.Once
}

type pipeConn struct {
	net.Conn
	local, remote pipeAddr
}

func (c pipeConn) LocalAddr() net.Addr  { return c.local }
func (c pipeConn) RemoteAddr() net.Addr { return c.remote }

func (t *pipeTransport) Listen(addr string) (net.Listener, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.listeners[addr]; ok {
		return nil, fmt.Errorf("pipe: %s in use", addr)
	}
	l := &pipeListener{tr: t, addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
	t.listeners[addr] = l
	return l, nil
}

func (t *pipeTransport) Dial(ctx context.Context, addr string) (net.Conn, error) {
	t.mu.Lock()
	l := t.listeners[addr]
	t.n++
	client := pipeAddr(fmt.Sprintf("client-%d", t.n))
	t.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("pipe: dial %s: connection refused", addr)
	}
	a, b := net.Pipe()
	var ca, cb net.Conn = pipeConn{a, client, pipeAddr(addr)}, pipeConn{b, pipeAddr(addr), client}
	if t.wrap != nil {
		ca, cb = t.wrap(ca, true), t.wrap(cb, false)
	}
	select {
	case l.ch <- cb:
		return ca, nil
	case <-l.done:
		return nil, fmt.Errorf("pipe: dial %s: connection refused", addr)
	case <-ctx.Done():
		return nil, fmt.Errorf("pipe: dial %s: %w", addr, ctx.Err())
	}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.closed.Do(func() {
		close(l.done)
		l.tr.mu.Lock()
		delete(l.tr.listeners, l.addr)
		l.tr.mu.Unlock()
	})
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr(l.addr) }

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
