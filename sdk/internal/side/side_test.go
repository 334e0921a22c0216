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

func frame(m proto.Message) []byte {
	b, _ := proto.Marshal(m)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// maxFrame is the fuzz target's bound (small, so oversized lengths are
// easy to reach).
const maxFrame = 1 << 20

// FuzzFrame: the frame reader never panics, rejects a length above its
// bound before allocating, and reads back what a writer framed.
func FuzzFrame(f *testing.F) {
	f.Add(frame(&storev1.AppendBatch{Seq: 1, Ops: []*storev1.AppendOp{{Op: &storev1.AppendOp_Raw{Raw: &storev1.RawAppend{Offset: 7, Data: []byte("abc")}}}}}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3})
	f.Add([]byte{0, 0, 0, 5, 0x08})
	f.Fuzz(func(t *testing.T, data []byte) {
		fc := side.NewFrameReader(bytes.NewReader(data), maxFrame)
		for {
			var b storev1.AppendBatch
			err := fc.Read(&b)
			if err != nil {
				if len(data) >= 4 && binary.BigEndian.Uint32(data) > maxFrame && !errors.Is(err, side.ErrFrameTooLarge) {
					t.Fatalf("oversized first frame: %v", err)
				}
				if fc.BufferCap() > maxFrame {
					t.Fatalf("allocated %d bytes", fc.BufferCap())
				}
				return
			}
		}
	})
}

// TestPluginSideFrames: frames written on one end of a real socket pair are
// read back in order, a half-close ends the stream with io.EOF, and an
// oversized message is refused before it is written.
func TestPluginSideFrames(t *testing.T) {
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
	host := <-accepted
	if host == nil {
		t.Fatal("no connection accepted")
	}
	a, b := side.NewFrameConn(dialed, 1<<10), side.NewFrameConn(host, 1<<10)
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
	if err := a.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 3; i++ {
		var ack storev1.AppendAck
		if err := b.Read(&ack); err != nil || ack.Seq != i {
			t.Fatalf("frame %d: %v %v", i, ack.Seq, err)
		}
	}
	var ack storev1.AppendAck
	if err := b.Read(&ack); !errors.Is(err, io.EOF) {
		t.Fatalf("after the half-close: %v", err)
	}
}
