package transport

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
)

// writeCounter counts Write calls (net.Buffers falls back to one Write per
// buffer on a writer without writev).
type writeCounter struct {
	bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) { w.writes++; return w.Buffer.Write(p) }

func TestFrameBatchClassicBytes(t *testing.T) {
	b := NewFrameBatch(false)
	var want []byte
	bodies := [][]byte{[]byte("first"), bytes.Repeat([]byte{'x'}, 1000), {}, []byte("last")}
	off := int64(4096)
	for _, body := range bodies {
		if err := b.Add(TransferHeader{Offset: off, Epoch: 9, Size: 12345}, body); err != nil {
			t.Fatal(err)
		}
		want = AppendFrame(want, off, body)
		off += int64(len(body))
	}
	if b.Len() != len(bodies) || b.HeaderSize() != HeaderSize {
		t.Fatalf("Len %d, HeaderSize %d", b.Len(), b.HeaderSize())
	}
	var w writeCounter
	n, err := b.WriteTo(&w)
	if err != nil || n != int64(len(want)) || !bytes.Equal(w.Bytes(), want) {
		t.Fatalf("WriteTo wrote %d bytes (%v): %x\nwant %x", n, err, w.Bytes(), want)
	}
	if b.Len() != 0 {
		t.Fatalf("Len after WriteTo = %d", b.Len())
	}
	for _, v := range b.vec {
		if v != nil {
			t.Fatal("the batch still references a body after WriteTo")
		}
	}
	// A heartbeat alone is one plain Write of the header.
	w.Reset()
	w.writes = 0
	if err := b.Add(TransferHeader{Offset: 77}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WriteTo(&w); err != nil || w.writes != 1 || !bytes.Equal(w.Bytes(), AppendFrame(nil, 77, nil)) {
		t.Fatalf("heartbeat: %d writes of %x, %v", w.writes, w.Bytes(), err)
	}
	if n, err := b.WriteTo(&w); n != 0 || err != nil || w.writes != 1 {
		t.Fatalf("empty batch: wrote %d, %v", n, err)
	}
}

func TestFrameBatchTransferBytes(t *testing.T) {
	b := NewFrameBatch(true)
	var want []byte
	h := TransferHeader{Offset: 1 << 30, Epoch: 3, EpochStartOffset: 1 << 29, ConfirmOffset: 1<<30 + 5}
	for _, body := range [][]byte{[]byte("abc"), nil, []byte("defgh")} {
		if err := b.Add(h, body); err != nil {
			t.Fatal(err)
		}
		hh := h
		hh.Size = int32(len(body))
		var hdr [TransferHeaderSize]byte
		PutTransferHeader(hdr[:], hh)
		want = append(append(want, hdr[:]...), body...)
		h.Offset += int64(len(body))
	}
	var w bytes.Buffer
	if _, err := b.WriteTo(&w); err != nil || !bytes.Equal(w.Bytes(), want) {
		t.Fatalf("WriteTo: %x (%v)\nwant %x", w.Bytes(), err, want)
	}
}

func TestFrameBatchRefuses(t *testing.T) {
	b := NewFrameBatch(false)
	if err := b.Add(TransferHeader{Offset: -1}, []byte("x")); !errors.Is(err, ErrNegativeOffset) {
		t.Fatalf("negative offset: %v", err)
	}
	if err := b.Add(TransferHeader{}, make([]byte, MaxBodyLimit+1)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("classic body above MaxBodyLimit: %v", err)
	}
	if err := NewFrameBatch(true).Add(TransferHeader{}, make([]byte, MaxTransferBodyLimit+1)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("transfer body above MaxTransferBodyLimit: %v", err)
	}
	if b.Len() != 0 {
		t.Fatalf("refused frames were added: Len %d", b.Len())
	}
	for i := range MaxBatchFrames {
		if err := b.Add(TransferHeader{Offset: int64(i)}, []byte{1}); err != nil {
			t.Fatal(err)
		}
	}
	if !b.Full() {
		t.Fatal("not Full at MaxBatchFrames")
	}
	if err := b.Add(TransferHeader{}, []byte{1}); err == nil {
		t.Fatal("a full batch took another frame")
	}
	b.Reset()
	if b.Len() != 0 || b.Full() {
		t.Fatal("Reset left frames")
	}
}

// TestFrameBatchTCP writes full batches over loopback TCP (one writev
// each) and reads them back with a FrameReader.
func TestFrameBatchTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		frames []Frame
		err    error
	}
	done := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		fr := NewFrameReader(c, MaxBodyLimit)
		var got []Frame
		for {
			f, err := fr.Next()
			if errors.Is(err, io.EOF) {
				done <- result{frames: got}
				return
			}
			if err != nil {
				done <- result{err: err}
				return
			}
			f.Body = bytes.Clone(f.Body)
			got = append(got, f)
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := NewFrameBatch(false)
	var want []Frame
	off := int64(0)
	for round := range 3 {
		for i := range MaxBatchFrames {
			body := bytes.Repeat([]byte{byte(round*MaxBatchFrames + i)}, 100+i*500)
			if err := b.Add(TransferHeader{Offset: off}, body); err != nil {
				t.Fatal(err)
			}
			want = append(want, Frame{Offset: off, Body: body})
			off += int64(len(body))
		}
		if _, err := b.WriteTo(c); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	r := <-done
	if r.err != nil || len(r.frames) != len(want) {
		t.Fatalf("read %d frames of %d: %v", len(r.frames), len(want), r.err)
	}
	for i, f := range r.frames {
		if f.Offset != want[i].Offset || !bytes.Equal(f.Body, want[i].Body) {
			t.Fatalf("frame %d: offset %d, %d bytes; want %d, %d", i, f.Offset, len(f.Body), want[i].Offset, len(want[i].Body))
		}
	}
}
