package transport

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
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
	c, srv := tcpPair(t)
	r := NewConnReader(c, time.Minute)
	if !r.StartReadAhead() {
		t.Skip("no file descriptor: read-ahead is Linux-only")
	}
	defer r.StopReadAhead()
	defer c.Close()
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
	c, srv := tcpPair(t)
	r := NewConnReader(c, time.Minute)
	if !r.StartReadAhead() {
		t.Skip("no file descriptor: read-ahead is Linux-only")
	}
	defer r.StopReadAhead()
	defer c.Close()
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
