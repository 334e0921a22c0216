package side_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"go.uber.org/goleak"

	"github.com/replicatorhq/replicator/sdk/internal/side"
	"github.com/replicatorhq/replicator/sdk/proto/storev1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPluginSide: the host accepts only the connection that
// presents the token, in a private directory it removes afterwards.
func TestPluginSide(t *testing.T) {
	l, err := side.Listen()
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Dir(l.Path))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("side channel directory: %v %v", fi.Mode(), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		ok  bool
		err error
	}
	got := make(chan res, 1)
	go func() {
		c, err := l.Accept(ctx)
		if c != nil {
			buf := make([]byte, 5)
			_, rerr := c.Read(buf)
			c.Close()
			got <- res{string(buf) == "hello" && rerr == nil, err}
			return
		}
		got <- res{false, err}
	}()
	wrong := make([]byte, side.TokenSize)
	bad, err := side.Dial(ctx, l.Path, wrong)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	good, err := side.Dial(ctx, l.Path, l.Token)
	if err != nil {
		t.Fatal(err)
	}
	good.Write([]byte("hello"))
	defer good.Close()
	if r := <-got; !r.ok || r.err != nil {
		t.Fatalf("accept: %+v", r)
	}
	if _, err := os.Stat(l.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket still there after the accept: %v", err)
	}
	if _, err := side.Dial(ctx, l.Path, l.Token); !errors.Is(err, side.ErrSetup) {
		t.Fatalf("second dial: %v, want ErrSideChannel", err)
	}
}

// TestPluginSideCancel: Accept gives up when its ctx ends.
func TestPluginSideCancel(t *testing.T) {
	l, err := side.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Accept(ctx); !errors.Is(err, context.Canceled) || !errors.Is(err, side.ErrSetup) {
		t.Fatalf("Accept with a cancelled ctx: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(l.Path)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("directory left behind: %v", err)
	}
}

func frame(m proto.Message, parts ...[]byte) []byte {
	b, err := side.AppendFrame(nil, m, parts)
	if err != nil {
		panic(err)
	}
	return b
}

// maxFrame is the fuzz target's bound (small, so oversized lengths are
// easy to reach).
const maxFrame = 1 << 20

// FuzzFrame: the frame reader never panics, rejects a length above its
// bound before allocating, checks that the part lengths add up, returns
// parts that tile the payload, and reads back what a writer framed.
func FuzzFrame(f *testing.F) {
	f.Add(frame(&storev1.AppendBatch{Seq: 1, Ops: []*storev1.AppendOp{{Op: &storev1.AppendOp_Raw{Raw: &storev1.RawAppend{Offset: 7}}}}}, []byte("abc")))
	f.Add(frame(&storev1.AppendAck{Seq: 2, Results: []*storev1.OpResult{{}, {}}}, []byte("record"), nil))
	f.Add(frame(&storev1.Chunk{Offset: 4096}, bytes.Repeat([]byte{7}, 300)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3})
	f.Add([]byte{0, 0, 0, 20, 0, 0, 0, 4, 0, 0, 0, 2, 0, 0, 0, 9, 0, 0, 0, 1})
	f.Add([]byte{0, 0, 0, 5, 0x08})
	f.Fuzz(func(t *testing.T, data []byte) {
		fc := side.NewFrameReader(bytes.NewReader(data), maxFrame)
		for {
			var b storev1.AppendBatch
			parts, err := fc.ReadShared(&b)
			if fc.BufferCap() > 2*maxFrame {
				t.Fatalf("allocated %d bytes", fc.BufferCap())
			}
			if err != nil {
				if len(data) >= side.FrameHeader && binary.BigEndian.Uint32(data) > maxFrame && !errors.Is(err, side.ErrFrameTooLarge) {
					t.Fatalf("oversized first frame: %v", err)
				}
				return
			}
			if len(parts) > side.MaxParts {
				t.Fatalf("%d parts", len(parts))
			}
			// What was read frames back to the same message and parts.
			again, err := side.AppendFrame(nil, &b, parts)
			if err != nil {
				t.Fatal(err)
			}
			var b2 storev1.AppendBatch
			parts2, err := side.NewFrameReader(bytes.NewReader(again), maxFrame).ReadOwned(&b2)
			if err != nil || !proto.Equal(&b, &b2) || len(parts2) != len(parts) {
				t.Fatalf("re-read: %v", err)
			}
			for i := range parts {
				if !bytes.Equal(parts[i], parts2[i]) {
					t.Fatalf("part %d differs", i)
				}
			}
		}
	})
}

// TestPluginSideBadFrame: lengths that do not add up, or a frame above
// the bound, fail before anything is allocated for them.
func TestPluginSideBadFrame(t *testing.T) {
	for name, tc := range map[string]struct {
		data []byte
		want error
	}{
		"oversized":      {[]byte{0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, side.ErrFrameTooLarge},
		"short length":   {[]byte{0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0}, side.ErrBadFrame},
		"message beyond": {[]byte{0, 0, 0, 8, 0, 0, 0, 9, 0, 0, 0, 0}, side.ErrBadFrame},
		"too many parts": {[]byte{0, 0, 0, 8, 0, 0, 0, 0, 0, 1, 0, 1}, side.ErrBadFrame},
		"parts too long": {append([]byte{0, 0, 0, 13, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2}, 'x'), side.ErrBadFrame},
		"parts short":    {append([]byte{0, 0, 0, 14, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1}, 'x', 'y'), side.ErrBadFrame},
		"cut payload":    {append([]byte{0, 0, 0, 14, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2}, 'x'), io.ErrUnexpectedEOF},
	} {
		fc := side.NewFrameReader(bytes.NewReader(tc.data), maxFrame)
		var c storev1.Chunk
		if _, err := fc.ReadOwned(&c); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
		if fc.BufferCap() > 64 {
			t.Errorf("%s: allocated %d bytes", name, fc.BufferCap())
		}
	}
}

// TestPluginSideFrames: frames written on one end of a real socket pair are
// read back in order, a half-close ends the stream with io.EOF, and an
// oversized message is refused before it is written.
func TestPluginSideFrames(t *testing.T) {
	a, b := framePair(t, 1<<10)
	defer a.Close()
	defer b.Close()
	for i := uint64(1); i <= 3; i++ {
		if err := a.Write(&storev1.AppendAck{Seq: i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Write(&storev1.RawAppend{Data: make([]byte, 2<<10)}); !errors.Is(err, side.ErrFrameTooLarge) {
		t.Fatalf("oversized write: %v", err)
	}
	if err := a.WriteParts(&storev1.Chunk{}, [][]byte{make([]byte, 2<<10)}); !errors.Is(err, side.ErrFrameTooLarge) {
		t.Fatalf("oversized parts: %v", err)
	}
	if err := a.WriteParts(&storev1.Chunk{Offset: 9}, [][]byte{[]byte("ab"), nil, []byte("cde")}); err != nil {
		t.Fatal(err)
	}
	if err := a.WriteParts(&storev1.Chunk{Offset: 10}, [][]byte{[]byte("xyz")}); err != nil {
		t.Fatal(err)
	}
	if err := a.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 3; i++ {
		var ack storev1.AppendAck
		if err := b.Read(&ack); err != nil || ack.Seq != i {
			t.Fatalf("frame %d: %v %v", i, ack.Seq, err)
		}
	}
	// Parts travel beside the message, shared (reused by the next read) or
	// owned.
	var got storev1.Chunk
	parts, err := b.ReadShared(&got)
	if err != nil || got.Offset != 9 || len(parts) != 3 || string(parts[0]) != "ab" || len(parts[1]) != 0 || string(parts[2]) != "cde" {
		t.Fatalf("shared parts: %v %q %v", got.Offset, parts, err)
	}
	parts, err = b.ReadOwned(&got)
	if err != nil || got.Offset != 10 || len(parts) != 1 || string(parts[0]) != "xyz" {
		t.Fatalf("owned parts: %v %q %v", got.Offset, parts, err)
	}
	var ack storev1.AppendAck
	if err := b.Read(&ack); !errors.Is(err, io.EOF) {
		t.Fatalf("after the half-close: %v", err)
	}
}

// framePair returns the plugin's and the host's FrameConn on a real side
// channel, frames bounded by maxFrame.
func framePair(t *testing.T, maxFrame int) (plugin, host *side.FrameConn) {
	t.Helper()
	l, err := side.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accepted := make(chan *net.UnixConn, 1)
	go func() {
		c, _ := l.Accept(ctx)
		accepted <- c
	}()
	dialed, err := side.Dial(ctx, l.Path, l.Token)
	if err != nil {
		t.Fatal(err)
	}
	hc := <-accepted
	if hc == nil {
		dialed.Close()
		t.Fatal("no connection accepted")
	}
	return side.NewFrameConn(dialed, maxFrame), side.NewFrameConn(hc, maxFrame)
}

// TestPluginSideFramesLarge: a frame of more parts than one writev takes
// (IOV_MAX, 1024) and more bytes than the socket buffers hold arrives
// whole and in order (the writer resumes partial writes after waiting for
// room), and once the reader's end is gone the writer fails with the
// socket's error instead of blocking.
func TestPluginSideFramesLarge(t *testing.T) {
	a, b := framePair(t, 64<<20)
	defer a.Close()
	parts := make([][]byte, 3000)
	for i := range parts {
		parts[i] = bytes.Repeat([]byte{byte(i)}, 1+i%7*1000)
		if i%10 == 3 {
			parts[i] = nil
		}
	}
	type got struct {
		parts [][]byte
		off   int64
		err   error
	}
	read := make(chan got, 1)
	go func() {
		var c storev1.Chunk
		p, err := b.ReadOwned(&c)
		read <- got{p, c.Offset, err}
	}()
	for range 2 {
		if err := a.WriteParts(&storev1.Chunk{Offset: 77}, parts); err != nil {
			t.Fatal(err)
		}
		r := <-read
		if r.err != nil || r.off != 77 || len(r.parts) != len(parts) {
			t.Fatalf("read: offset %d, %d parts, %v", r.off, len(r.parts), r.err)
		}
		for i := range parts {
			if !bytes.Equal(r.parts[i], parts[i]) {
				t.Fatalf("part %d: %d bytes, want %d", i, len(r.parts[i]), len(parts[i]))
			}
		}
		go func() {
			var c storev1.Chunk
			p, err := b.ReadOwned(&c)
			read <- got{p, c.Offset, err}
		}()
	}
	b.Close()
	if r := <-read; !errors.Is(r.err, io.ErrUnexpectedEOF) {
		t.Fatalf("read on a closed end: %v", r.err)
	}
	var err error
	for range 10 { // the first writes may still fit the socket's buffer
		if err = a.WriteParts(&storev1.Chunk{}, parts); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("write to a closed peer: %v", err)
	}
}

// TestPluginSideQueuedFrames: frames queued with QueueParts go out with the
// next Flush (or WriteParts), in order, as separate frames; an oversized
// frame is refused without disturbing the queue; Buffered reports a frame
// that has begun to arrive.
func TestPluginSideQueuedFrames(t *testing.T) {
	a, b := framePair(t, 1<<10)
	defer a.Close()
	defer b.Close()
	for i := range 3 {
		if err := a.QueueParts(&storev1.Chunk{Offset: int64(i)}, [][]byte{{byte('a' + i)}, nil}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.QueueParts(&storev1.Chunk{}, [][]byte{make([]byte, 2<<10)}); !errors.Is(err, side.ErrFrameTooLarge) {
		t.Fatalf("oversized frame: %v", err)
	}
	if n := a.Queued(); n != 3 {
		t.Fatalf("%d frames queued, want 3", n)
	}
	if b.Buffered() {
		t.Fatal("Buffered before anything was sent")
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := a.QueueParts(&storev1.Chunk{Offset: 3}, [][]byte{[]byte("d")}); err != nil {
		t.Fatal(err)
	}
	if err := a.WriteParts(&storev1.Chunk{Offset: 4}, [][]byte{[]byte("e")}); err != nil {
		t.Fatal(err)
	}
	if a.Queued() != 0 {
		t.Fatal("frames left queued after WriteParts")
	}
	for i := range 5 {
		var c storev1.Chunk
		parts, err := b.ReadOwned(&c)
		if err != nil || c.Offset != int64(i) || len(parts) == 0 || string(parts[0]) != string(rune('a'+i)) {
			t.Fatalf("frame %d: offset %d, parts %q, %v", i, c.Offset, parts, err)
		}
		if want := i < 4; b.Buffered() != want && i != 2 {
			t.Fatalf("after frame %d: Buffered %v, want %v", i, !want, want)
		}
	}
}

// TestPluginSideReadInto: ReadInto asks for the frame's payload length
// only once its lengths add up (never for a malformed frame) and returns
// the parts in the buffer it was given.
func TestPluginSideReadInto(t *testing.T) {
	data, err := side.AppendFrame(nil, &storev1.Chunk{Offset: 7}, [][]byte{[]byte("abc"), []byte("de")})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	asked := -1
	var c storev1.Chunk
	parts, err := side.NewFrameReader(bytes.NewReader(data), maxFrame).ReadInto(&c, func(n int) []byte {
		asked = n
		return buf
	})
	if err != nil || asked != 5 || c.Offset != 7 || len(parts) != 2 || string(parts[0]) != "abc" || string(parts[1]) != "de" {
		t.Fatalf("ReadInto: asked %d, parts %q, %v", asked, parts, err)
	}
	if &parts[0][0] != &buf[0] || &parts[1][0] != &buf[3] {
		t.Fatal("the parts are not in the given buffer")
	}
	bad := append([]byte{0, 0, 0, 13, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2}, 'x')
	_, err = side.NewFrameReader(bytes.NewReader(bad), maxFrame).ReadInto(&c, func(n int) []byte {
		t.Errorf("asked for %d bytes for a malformed frame", n)
		return make([]byte, n)
	})
	if !errors.Is(err, side.ErrBadFrame) {
		t.Fatalf("malformed frame: %v", err)
	}
}
