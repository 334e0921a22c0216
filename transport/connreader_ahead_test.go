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
