package transport

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"net"
	"testing"
	"time"
)

// TestConnReaderReadAheadTCP: with read-ahead on a real socket the bytes
// come out whole and in order across many ring buffers, through Read and
// ReadVec; an armed read with nothing in the ring returns ErrWouldBlock
// once the socket is empty, and the next read waits for the peer; the
// peer's close ends the stream with io.EOF and StopReadAhead ends the
// goroutine (goleak checks the package).
func TestConnReaderReadAheadTCP(t *testing.T) {
	r, srv := readAheadPair(t)
	if r.StartReadAhead() {
		t.Fatal("second StartReadAhead started another goroutine")
	}
	r.Arm()
	var one [8]byte
	if _, err := r.Read(one[:]); !errors.Is(err, ErrWouldBlock) {
		t.Fatalf("armed read on an empty socket: %v, want ErrWouldBlock", err)
	}

	want := make([]byte, 3*aheadBufs*aheadSize+12345) // cycles the ring thrice
	rand.New(rand.NewSource(1)).Read(want)
	werr := make(chan error, 1)
	go func() {
		_, err := srv.Write(want)
		werr <- err
	}()
	got := make([]byte, 0, len(want))
	a, b := make([]byte, 1000), make([]byte, 70000)
	for len(got) < len(want) {
		n, err := r.ReadVec([][]byte{a, b})
		if err != nil {
			t.Fatalf("ReadVec after %d bytes: %v", len(got), err)
		}
		if n > len(a) {
			got = append(append(got, a...), b[:n-len(a)]...)
		} else {
			got = append(got, a[:n]...)
		}
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("read-ahead delivered %d bytes, not the %d written (or in another order)", len(got), len(want))
	}

	// Idle again: armed, ErrWouldBlock; disarmed by it, the next read waits.
	r.Arm()
	if _, err := r.Read(one[:]); !errors.Is(err, ErrWouldBlock) {
		t.Fatalf("armed read after the stream paused: %v, want ErrWouldBlock", err)
	}
	go srv.Write([]byte("tail"))
	if _, err := io.ReadFull(r, one[:4]); err != nil || string(one[:4]) != "tail" {
		t.Fatalf("read after ErrWouldBlock: %q, %v", one[:4], err)
	}
	srv.Close()
	if n, err := r.Read(one[:]); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("read after the peer closed: %d, %v; want io.EOF", n, err)
	}
	if _, err := r.Read(one[:]); !errors.Is(err, io.EOF) {
		t.Fatalf("second read after the peer closed: %v; want io.EOF again", err)
	}
}

// TestConnReaderReadAheadStopFull: StopReadAhead returns when the ring is
// full and nobody reads (the goroutine waits for a free buffer, not the
// socket).
func TestConnReaderReadAheadStopFull(t *testing.T) {
	c, srv := tcpPair(t)
	r := NewConnReader(c, time.Minute)
	if !r.StartReadAhead() {
		t.Skip("no file descriptor: read-ahead is Linux-only")
	}
	go srv.Write(make([]byte, 2*aheadBufs*aheadSize)) // fails once c closes
	var one [1]byte
	if _, err := io.ReadFull(r, one[:]); err != nil { // the ring fills meanwhile
		t.Fatal(err)
	}
	c.Close()
	r.StopReadAhead()
}

// TestConnReaderReadAheadAdaptive: the read-ahead goroutine runs only
// while the socket holds a backlog. Small writes read one at a time are
// read by the caller (no goroutine); a backlog larger than a ring buffer
// starts the goroutine at the read that finds it, and the goroutine pauses
// once it has drained the socket, handing the reads back to the caller;
// the bytes come out whole and in order through both.
func TestConnReaderReadAheadAdaptive(t *testing.T) {
	r, srv := readAheadPair(t)
	rnd := rand.New(rand.NewSource(2))
	small := make([]byte, 3000)
	for i := range 20 {
		rnd.Read(small)
		if _, err := srv.Write(small); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(small))
		if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, small) {
			t.Fatalf("small write %d: %v, or other bytes", i, err)
		}
		if r.ah.running {
			t.Fatalf("small write %d: the read-ahead goroutine runs without a backlog", i)
		}
	}

	want := make([]byte, 3*aheadSize+777)
	rnd.Read(want)
	werr := make(chan error, 1)
	go func() {
		_, err := srv.Write(want)
		werr <- err
	}()
	// Loopback's socket buffers hold the backlog: wait for the write to
	// end, so that the kernel holds it all before the first read (on a
	// host with smaller buffers the reads below drain it instead).
	inKernel := false
	select {
	case err := <-werr:
		if err != nil {
			t.Fatal(err)
		}
		inKernel = true
	case <-time.After(10 * time.Second):
	}
	// The kernel may hand a read less than the whole backlog (loopback
	// segments): read on until one read started the goroutine.
	got := make([]byte, 0, len(want))
	buf := make([]byte, 1000)
	started := false
	for len(got) < len(want) {
		n, err := r.Read(buf[:min(len(buf), len(want)-len(got))])
		if err != nil {
			t.Fatalf("read after %d bytes: %v", len(got), err)
		}
		got = append(got, buf[:n]...)
		started = started || r.ah.running
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the backlog came out as other bytes")
	}
	if !inKernel {
		if err := <-werr; err != nil {
			t.Fatal(err)
		}
	}
	if !started && inKernel {
		t.Fatal("a backlog of three ring buffers did not start the read-ahead goroutine")
	}
	// Drained: the next armed read finds the pause marker (or nothing, if
	// the caller already reads), then the empty socket.
	r.Arm()
	var one [8]byte
	if _, err := r.Read(one[:]); !errors.Is(err, ErrWouldBlock) {
		t.Fatalf("armed read on a drained socket: %v, want ErrWouldBlock", err)
	}
	if r.ah.running {
		t.Fatal("the read-ahead goroutine still runs on a drained socket")
	}
	go srv.Write([]byte("tail"))
	if _, err := io.ReadFull(r, one[:4]); err != nil || string(one[:4]) != "tail" {
		t.Fatalf("read after the pause: %q, %v", one[:4], err)
	}
}

// TestConnReaderView: with read-ahead on, View hands out the stream's
// bytes whole and in order, at most max at a time and never across a
// ring buffer's end, while the peer writes enough to cycle the ring many
// times; each view keeps its bytes until the next read (checked right
// before it, while the read-ahead goroutine fills the other buffers: the
// race detector sees its writes too); Read and View mix. Without
// read-ahead View fails.
func TestConnReaderView(t *testing.T) {
	c, srv := tcpPair(t)
	r := NewConnReader(c, time.Minute)
	if _, err := r.View(10); !errors.Is(err, errNoReadAhead) || r.ReadsAhead() {
		t.Fatalf("View without read-ahead: %v (ReadsAhead %v), want errNoReadAhead", err, r.ReadsAhead())
	}
	if !r.StartReadAhead() {
		t.Skip("no file descriptor: read-ahead is Linux-only")
	}
	defer r.StopReadAhead()
	defer c.Close()
	if !r.ReadsAhead() {
		t.Fatal("ReadsAhead false after StartReadAhead")
	}
	if v, err := r.View(0); v != nil || err != nil {
		t.Fatalf("View(0) = %d bytes, %v", len(v), err)
	}
	want := make([]byte, 5*aheadBufs*aheadSize+4321)
	rnd := rand.New(rand.NewSource(3))
	rnd.Read(want)
	werr := make(chan error, 1)
	go func() {
		_, err := srv.Write(want)
		werr <- err
	}()
	got := make([]byte, 0, len(want))
	var prev []byte // the previous view, checked once the next one is taken
	prevAt := 0
	for len(got) < len(want) {
		// The previous view still holds its bytes, up to this next read.
		if prev != nil && !bytes.Equal(prev, want[prevAt:prevAt+len(prev)]) {
			t.Fatalf("the view at %d changed before the next read", prevAt)
		}
		max := 1 + rnd.Intn(3*aheadSize/2)
		if rnd.Intn(8) == 0 {
			buf := make([]byte, max)
			n, err := r.Read(buf)
			if err != nil {
				t.Fatalf("Read after %d bytes: %v", len(got), err)
			}
			got = append(got, buf[:n]...)
			prev = nil
			continue
		}
		v, err := r.View(max)
		if err != nil {
			t.Fatalf("View after %d bytes: %v", len(got), err)
		}
		if len(v) == 0 || len(v) > max || len(v) > aheadSize || cap(v) != len(v) {
			t.Fatalf("View(%d) = %d bytes (cap %d)", max, len(v), cap(v))
		}
		prev, prevAt = v, len(got)
		got = append(got, v...)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("views delivered other bytes than written")
	}
	srv.Close()
	if _, err := r.View(1); !errors.Is(err, io.EOF) {
		t.Fatalf("View after the peer closed: %v, want io.EOF", err)
	}
}

// viewFrames is a stream of classic frames with bodies of every kind: a
// heartbeat, small bodies (staged with their headers), large ones, and one
// larger than a ring buffer.
func viewFrames(rnd *rand.Rand) ([]byte, [][]byte) {
	var stream []byte
	var bodies [][]byte
	off := int64(0)
	for i := range 400 {
		var n int
		switch {
		case i == 7:
			n = 2*aheadSize + 999
		case i%9 == 0:
			n = 0
		case i%3 == 0:
			n = 1 + rnd.Intn(directMin)
		default:
			n = DefaultBatchSize - rnd.Intn(100)
		}
		body := make([]byte, n)
		rnd.Read(body)
		stream = AppendFrame(stream, off, body)
		bodies = append(bodies, body)
		off += int64(n)
	}
	return stream, bodies
}

// TestDirectReaderView: over a ConnReader reading ahead on real TCP, the
// direct readers' View hands out each frame's body whole, in pieces of at
// most the asked size, the staged part first and then the ring's, with
// io.EOF at the body's end, for both protocols; Views says so, and is
// false on a reader without read-ahead.
func TestDirectReaderView(t *testing.T) {
	if NewDirectReader(ReaderVec{R: bytes.NewReader(nil)}, 0).Views() {
		t.Fatal("Views true on a plain reader")
	}
	rnd := rand.New(rand.NewSource(4))
	classic, bodies := viewFrames(rnd)
	var fs []asFrame
	off := int64(0)
	for _, b := range bodies {
		fs = append(fs, transferFrame(off, 1, 0, off, b))
		off += int64(len(b))
	}
	auto := encodeAS(t, fs)
	for _, tc := range []struct {
		name   string
		stream []byte
		open   func(*ConnReader) (func() (int, error), interface {
			View(int) ([]byte, error)
			Views() bool
		})
	}{
		{"classic", classic, func(cr *ConnReader) (func() (int, error), interface {
			View(int) ([]byte, error)
			Views() bool
		}) {
			d := NewDirectReader(cr, 0)
			return func() (int, error) { h, err := d.Next(); return h.Size, err }, d
		}},
		{"autoswitch", auto, func(cr *ConnReader) (func() (int, error), interface {
			View(int) ([]byte, error)
			Views() bool
		}) {
			d := NewAutoSwitchDirectReader(cr, 0)
			return func() (int, error) { f, err := d.Next(); return int(f.Transfer.Size), err }, d
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cr, srv := readAheadPair(t)
			next, d := tc.open(cr)
			if !d.Views() {
				t.Fatal("Views false on a ConnReader reading ahead")
			}
			werr := make(chan error, 1)
			go func() {
				_, err := srv.Write(tc.stream)
				werr <- err
			}()
			for i, want := range bodies {
				size, err := next()
				if err != nil || size != len(want) {
					t.Fatalf("frame %d: size %d, %v; want %d", i, size, err, len(want))
				}
				var got []byte
				for len(got) < size {
					max := 1 + rnd.Intn(40<<10)
					v, err := d.View(max)
					if err != nil || len(v) == 0 || len(v) > max {
						t.Fatalf("frame %d: View(%d) after %d bytes: %d bytes, %v", i, max, len(got), len(v), err)
					}
					got = append(got, v...)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("frame %d: the views hold other bytes", i)
				}
				if v, err := d.View(10); len(v) != 0 || !errors.Is(err, io.EOF) {
					t.Fatalf("frame %d: View past the body: %d bytes, %v; want io.EOF", i, len(v), err)
				}
			}
			if err := <-werr; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDirectReaderViewTruncated: a body cut off by the peer's close ends
// in ErrTruncated (also io.ErrUnexpectedEOF) through View, as through Read.
func TestDirectReaderViewTruncated(t *testing.T) {
	cr, srv := readAheadPair(t)
	d := NewDirectReader(cr, 0)
	stream := AppendFrame(nil, 0, make([]byte, 3*aheadSize))
	go func() {
		srv.Write(stream[:len(stream)-100])
		srv.Close()
	}()
	if h, err := d.Next(); err != nil || h.Size != 3*aheadSize {
		t.Fatalf("Next: %+v, %v", h, err)
	}
	got := 0
	for {
		v, err := d.View(1 << 20)
		if err != nil {
			if !errors.Is(err, ErrTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("after %d body bytes: %v, want ErrTruncated", got, err)
			}
			break
		}
		got += len(v)
	}
	if got != 3*aheadSize-100 {
		t.Fatalf("%d body bytes before the error, want %d", got, 3*aheadSize-100)
	}
}

// readAheadPair is a TCP pair whose client end reads ahead through a
// ConnReader (the test is skipped where read-ahead is unsupported); the
// reader's goroutine is stopped and the connection closed at the test's end.
func readAheadPair(t *testing.T) (r *ConnReader, srv net.Conn) {
	t.Helper()
	c, srv := tcpPair(t)
	r = NewConnReader(c, time.Minute)
	if !r.StartReadAhead() {
		t.Skip("no file descriptor: read-ahead is Linux-only")
	}
	t.Cleanup(func() {
		c.Close()
		r.StopReadAhead()
	})
	return r, srv
}
