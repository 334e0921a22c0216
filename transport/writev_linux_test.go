package transport

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// withProcs runs the test with GOMAXPROCS n (the raw write needs n > 1).
func withProcs(t *testing.T, n int) {
	t.Helper()
	if runtime.GOMAXPROCS(0) != n {
		prev := runtime.GOMAXPROCS(n)
		t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	}
}

// smallBuffers shrinks the writer's send buffer so that a batch takes many
// partial writes and waits for room in between (the reader's stays at
// 64 KiB: with a tiny receive window loopback TCP stalls on delayed acks).
func smallBuffers(t *testing.T, client, server net.Conn) {
	t.Helper()
	if err := client.(*net.TCPConn).SetWriteBuffer(4096); err != nil {
		t.Fatal(err)
	}
	if err := server.(*net.TCPConn).SetReadBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
}

// addRandom adds frames of random sizes (heartbeats among them) to b at
// off and returns the bytes net.Buffers writes for them, from a second
// batch written to a plain writer, and the next offset.
func addRandom(t *testing.T, rnd *rand.Rand, b *FrameBatch, frames, maxBody int, off int64) ([]byte, int64) {
	t.Helper()
	ref := NewFrameBatch(b.transfer)
	for i := range frames {
		body := make([]byte, 0)
		if rnd.IntN(8) != 0 {
			body = make([]byte, 1+rnd.IntN(maxBody))
			for j := range body {
				body[j] = byte(rnd.Uint32())
			}
		}
		h := TransferHeader{Offset: off, Epoch: int32(i + 1), EpochStartOffset: off / 2, ConfirmOffset: off}
		if err := b.Add(h, body); err != nil {
			t.Fatal(err)
		}
		if err := ref.Add(h, body); err != nil {
			t.Fatal(err)
		}
		off += int64(len(body))
	}
	var want bytes.Buffer
	if _, err := ref.WriteTo(&want); err != nil {
		t.Fatal(err)
	}
	return want.Bytes(), off
}

// readAll reads c in small reads until EOF and sends what it read.
func readAll(c net.Conn, chunk int, out chan<- []byte) {
	var got []byte
	buf := make([]byte, chunk)
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			out <- got
			return
		}
	}
}

// TestFrameBatchRawWritev writes batches of both protocols through the
// raw writev to a slow reader behind small socket buffers: every batch
// takes partial writes that end inside a header or a body and waits for
// room; the reader gets the bytes net.Buffers writes, in order.
func TestFrameBatchRawWritev(t *testing.T) {
	withProcs(t, 2)
	client, server := tcpPair(t)
	smallBuffers(t, client, server)
	got := make(chan []byte, 1)
	go readAll(server, 777, got)

	rnd := rand.New(rand.NewPCG(1, 2))
	batches := [2]*FrameBatch{NewFrameBatch(false), NewFrameBatch(true)}
	var want []byte
	off := int64(0)
	for round := range 30 {
		b := batches[round%2]
		frames := 1 + rnd.IntN(MaxBatchFrames)
		if round%7 == 0 {
			frames = MaxBatchFrames
		}
		w, next := addRandom(t, rnd, b, frames, 64<<10, off)
		off = next
		n, err := b.WriteTo(client)
		if err != nil || n != int64(len(w)) {
			t.Fatalf("round %d: wrote %d of %d bytes: %v", round, n, len(w), err)
		}
		if b.raw == nil || b.raw.w != client {
			t.Fatalf("round %d: %d frames did not take the raw writev", round, frames)
		}
		for _, v := range b.raw.iov {
			if v.Base != nil || v.Len != 0 {
				t.Fatal("the raw writer still references a body after WriteTo")
			}
		}
		want = append(want, w...)
	}
	client.Close()
	if g := <-got; !bytes.Equal(g, want) {
		i := 0
		for i < min(len(g), len(want)) && g[i] == want[i] {
			i++
		}
		t.Fatalf("read %d bytes, want %d; first difference at %d", len(g), len(want), i)
	}
}

// TestFrameBatchRawWritevDeadline: a write deadline that expires while the
// send buffer is full ends the write with os.ErrDeadlineExceeded and the
// bytes that went out, which the reader then gets.
func TestFrameBatchRawWritevDeadline(t *testing.T) {
	withProcs(t, 2)
	client, server := tcpPair(t)
	smallBuffers(t, client, server)
	b := NewFrameBatch(false)
	want, _ := addRandom(t, rand.New(rand.NewPCG(3, 4)), b, MaxBatchFrames, 64<<10, 0)
	if err := client.SetWriteDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	n, err := b.WriteTo(client)
	var op *net.OpError
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &op) || op.Op != "writev" {
		t.Fatalf("WriteTo: %v (%T), want a writev OpError of os.ErrDeadlineExceeded", err, err)
	}
	if b.raw == nil || n <= 0 || n >= int64(len(want)) {
		t.Fatalf("raw writer %v, wrote %d of %d bytes", b.raw != nil, n, len(want))
	}
	client.Close()
	got, err := io.ReadAll(server)
	if err != nil || !bytes.Equal(got, want[:n]) {
		t.Fatalf("read %d bytes (%v), want the %d written", len(got), err, n)
	}
}

// TestFrameBatchRawWritevClosed: a write on a closed connection, one
// blocked when the connection closes, and one to a peer that reset the
// connection fail with the net package's errors.
func TestFrameBatchRawWritevClosed(t *testing.T) {
	withProcs(t, 2)
	rnd := rand.New(rand.NewPCG(5, 6))

	t.Run("blocked", func(t *testing.T) {
		client, server := tcpPair(t)
		smallBuffers(t, client, server)
		b := NewFrameBatch(true)
		want, _ := addRandom(t, rnd, b, MaxBatchFrames, 64<<10, 0)
		type result struct {
			n   int64
			err error
		}
		done := make(chan result, 1)
		go func() {
			n, err := b.WriteTo(client)
			done <- result{n, err}
		}()
		// The write has started; with the reader stopped it cannot end.
		if _, err := io.ReadFull(server, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		client.Close()
		r := <-done
		if !errors.Is(r.err, net.ErrClosed) || r.n <= 0 || r.n >= int64(len(want)) {
			t.Fatalf("WriteTo wrote %d of %d bytes: %v, want net.ErrClosed", r.n, len(want), r.err)
		}
		// Closed before the write: nothing goes out.
		addRandom(t, rnd, b, 2, 100, 0)
		if n, err := b.WriteTo(client); n != 0 || !errors.Is(err, net.ErrClosed) || b.raw == nil {
			t.Fatalf("WriteTo after Close: %d, %v (raw %v)", n, err, b.raw != nil)
		}
	})

	t.Run("reset", func(t *testing.T) {
		client, server := tcpPair(t)
		b := NewFrameBatch(false)
		addRandom(t, rnd, b, 2, 100, 0)
		if _, err := b.WriteTo(client); err != nil {
			t.Fatal(err)
		}
		if err := server.(*net.TCPConn).SetLinger(0); err != nil {
			t.Fatal(err)
		}
		server.Close() // unread bytes: the peer resets
		var err error
		for range 100 {
			addRandom(t, rnd, b, 4, 64<<10, 0)
			if _, err = b.WriteTo(client); err != nil {
				break
			}
		}
		var op *net.OpError
		if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("WriteTo to a reset peer: %v", err)
		}
		if !errors.As(err, &op) || op.Op != "writev" || op.Addr == nil {
			t.Fatalf("error %v (%T) is not a writev OpError with the peer's address", err, err)
		}
	})
}

type embedTCP struct{ *net.TCPConn } // promotes SyscallConn and Write
type embedConn struct{ net.Conn }    // hides SyscallConn (a throttle)

// TestFrameBatchRawWritevWho: only TCP connections with more than one P
// take the raw write; TLS, wrappers that hide the socket, pipes and value
// types keep net.Buffers, and the bytes are the same either way.
func TestFrameBatchRawWritevWho(t *testing.T) {
	withProcs(t, 2)
	client, server := tcpPair(t)
	tc := client.(*net.TCPConn)
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	for _, c := range []struct {
		name string
		w    io.Writer
		raw  bool
	}{
		{"tcp", tc, true},
		{"embedded tcp", &embedTCP{tc}, true},
		{"embedded tcp value", embedTCP{tc}, false},
		{"hidden tcp", &embedConn{tc}, false},
		{"tls", tls.Client(tc, &tls.Config{InsecureSkipVerify: true}), false},
		{"pipe", p1, false},
		{"buffer", &bytes.Buffer{}, false},
	} {
		if r := rawWriterFor(nil, c.w); (r != nil) != c.raw {
			t.Errorf("%s: raw writer %v, want %v", c.name, r != nil, c.raw)
		}
	}
	b := NewFrameBatch(false)
	if r := b.rawFor(tc); r == nil || rawWriterFor(r, tc) != r {
		t.Fatal("the batch does not keep its raw writer")
	}

	// One P: net.Buffers, same bytes on the wire.
	got := make(chan []byte, 1)
	go readAll(server, 4096, got)
	rnd := rand.New(rand.NewPCG(7, 8))
	var want []byte
	for procs := 1; procs <= 2; procs++ {
		runtime.GOMAXPROCS(procs)
		b := NewFrameBatch(false)
		w, _ := addRandom(t, rnd, b, MaxBatchFrames, 8<<10, 0)
		if n, err := b.WriteTo(client); err != nil || n != int64(len(w)) || (b.raw != nil) != (procs > 1) {
			t.Fatalf("GOMAXPROCS %d: wrote %d of %d (%v), raw %v", procs, n, len(w), err, b.raw != nil)
		}
		want = append(want, w...)
	}
	client.Close()
	if g := <-got; !bytes.Equal(g, want) {
		t.Fatalf("read %d bytes, want %d", len(g), len(want))
	}
}
