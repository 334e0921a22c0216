package transport

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"
)

// tcpPair returns both ends of a real TCP connection on 127.0.0.1.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			acc <- nil
			return
		}
		acc <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-acc
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestConnReaderArmTCP: on a socket, an armed read returns what the kernel
// holds at once and ErrWouldBlock when it holds nothing (without waiting);
// it disarms itself, so the next read waits; a frame reader passes the
// error up without losing buffered bytes.
func TestConnReaderArmTCP(t *testing.T) {
	c, srv := tcpPair(t)
	r := NewConnReader(c, time.Minute)
	if runtime.GOOS == "linux" && !r.Vectored() {
		t.Fatal("a TCP connection on Linux should be vectored")
	}
	r.Arm()
	buf := make([]byte, 16)
	if _, err := r.Read(buf); !errors.Is(err, ErrWouldBlock) {
		t.Fatalf("armed read on an empty socket: %v, want ErrWouldBlock", err)
	}
	// A frame split in two: the reader returns ErrWouldBlock after the
	// first half, keeps it, and returns the frame once the rest arrives.
	frame := append(headerBytes(100, 4), "abcd"...)
	if _, err := srv.Write(frame[:7]); err != nil {
		t.Fatal(err)
	}
	fr := NewFrameReader(r, 1<<10)
	for {
		r.Arm()
		_, err := fr.Next()
		if errors.Is(err, ErrWouldBlock) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Fatal("a frame from half of one")
	}
	go srv.Write(frame[7:])
	f, err := fr.Next() // disarmed: waits
	if err != nil || f.Offset != 100 || string(f.Body) != "abcd" {
		t.Fatalf("frame %+v, %v", f, err)
	}
}

// headerBytes is a frame header as a new slice.
func headerBytes(off int64, size int32) []byte {
	b := make([]byte, HeaderSize)
	PutHeader(b, off, size)
	return b
}

// TestConnReaderArmPipe: without a file descriptor an armed read returns
// ErrWouldBlock without looking; the idle deadline applies to waiting
// reads.
func TestConnReaderArmPipe(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	r := NewConnReader(a, 20*time.Millisecond)
	if r.Vectored() {
		t.Fatal("net.Pipe has no file descriptor")
	}
	r.Arm()
	if _, err := r.ReadVec([][]byte{make([]byte, 4)}); !errors.Is(err, ErrWouldBlock) {
		t.Fatalf("armed: %v", err)
	}
	go b.Write([]byte("xy"))
	p := make([]byte, 4)
	if n, err := r.Read(p); err != nil || string(p[:n]) != "xy" {
		t.Fatalf("read %q, %v", p[:n], err)
	}
	if _, err := r.Read(p); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("idle read: %v, want a deadline error", err)
	}
}

// TestConnReaderEOF: a closed peer reads as io.EOF on both paths.
func TestConnReaderEOF(t *testing.T) {
	c, srv := tcpPair(t)
	srv.Close()
	r := NewConnReader(c, time.Minute)
	if _, err := r.ReadVec([][]byte{make([]byte, 8)}); !errors.Is(err, io.EOF) {
		t.Fatalf("%v, want EOF", err)
	}
}
