package core_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/replicatorhq/replicator/core"
	"github.com/replicatorhq/replicator/plugins/commitlog"
	tcptransport "github.com/replicatorhq/replicator/plugins/transport-tcp"
	"github.com/replicatorhq/replicator/sdk/record"
	"github.com/replicatorhq/replicator/sdk/store"
	"github.com/replicatorhq/replicator/transport"
)

var _ store.AppenderFrom = (*commitlog.Log)(nil)

// directSetup: a commitlog source log holding records, a fake master
// listening on real TCP, and a slave on a commitlog store (which takes the
// direct socket-to-mapping path) connected to it.
func directSetup(t *testing.T, prefault bool) (src *commitlog.Log, slog *commitlog.Log, s *core.SlaveNode, c net.Conn) {
	t.Helper()
	opts := commitlog.DefaultOptions()
	opts.SegmentSize = tcpSegSize
	opts.Prefault = prefault
	var err error
	src, err = commitlog.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	for i := 0; src.Bounds().Max < 2*tcpSegSize+5000; i++ {
		if _, err := src.Append(context.Background(), &record.Message{Topic: "T", Body: bytes.Repeat([]byte{byte(i)}, 100+i*37%3000)}); err != nil {
			t.Fatal(err)
		}
	}
	slog, err = commitlog.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slog.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s, err = core.NewSlave(slog, tcptransport.New(tcptransport.DefaultOptions()), core.SlaveConfig{MasterAddr: ln.Addr().String(), Logger: tlogger(t), ReconnectDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if v := readTCPReport(t, c); v != 0 {
		t.Fatalf("first report %d, want 0", v)
	}
	return src, slog, s, c
}

func readTCPReport(t *testing.T, c net.Conn) int64 {
	t.Helper()
	var b [8]byte
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("read report: %v", err)
	}
	return int64(binary.BigEndian.Uint64(b[:]))
}

// sourceFrames cuts src's bytes [0, end) into frames as a master does (at
// most batch bytes, never across a segment end), with heartbeats between.
func sourceFrames(t *testing.T, src *commitlog.Log, end int64, r *rand.Rand) []byte {
	t.Helper()
	var stream []byte
	for off := int64(0); off < end; {
		n := transport.DefaultBatchSize
		if r.Intn(3) == 0 {
			n = 1 + r.Intn(3000)
		}
		v, err := src.Read(off, int(min(int64(n), end-off)))
		if err != nil {
			t.Fatal(err)
		}
		stream = transport.AppendFrame(stream, off, v.Data)
		off += int64(len(v.Data))
		v.Release()
		if r.Intn(10) == 0 {
			stream = transport.AppendFrame(stream, off, nil)
		}
	}
	return stream
}

// TestCoreDirectSplitWrites: over real TCP, frames written in pieces of
// random sizes (down to single bytes) reach the slave's commitlog through
// the direct path byte for byte, with and without prefaulting, and the
// slave's reports end at the last offset.
func TestCoreDirectSplitWrites(t *testing.T) {
	for _, prefault := range []bool{true, false} {
		src, slog, s, c := directSetup(t, prefault)
		r := rand.New(rand.NewSource(int64(len(t.Name()))))
		end := src.Bounds().Max
		stream := sourceFrames(t, src, end, r)
		go func() {
			for len(stream) > 0 {
				n := min(len(stream), 1+r.Intn(40000))
				if r.Intn(4) == 0 {
					n = min(len(stream), 1+r.Intn(13))
				}
				if _, err := c.Write(stream[:n]); err != nil {
					return
				}
				stream = stream[n:]
			}
		}()
		for v := readTCPReport(t, c); v != end; v = readTCPReport(t, c) {
			if v > end {
				t.Fatalf("report %d beyond %d", v, end)
			}
		}
		for off := int64(0); off < end; {
			a, err := src.Read(off, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			b, err := slog.Read(off, len(a.Data))
			if err != nil || !bytes.Equal(a.Data, b.Data) {
				t.Fatalf("prefault=%v: slave bytes at %d differ (%v)", prefault, off, err)
			}
			off += int64(len(a.Data))
			a.Release()
			b.Release()
		}
		if st := s.Status(); st.LastError != "" || st.MaxOffset != end {
			t.Fatalf("prefault=%v: status %+v", prefault, st)
		}
	}
}

// TestCoreDirectDrops: on the direct path a frame at the wrong offset, an
// oversized size field and a body cut by the master's close each end the
// connection.
func TestCoreDirectDrops(t *testing.T) {
	cases := []struct {
		name  string
		bytes func(src *commitlog.Log) []byte
		want  string
	}{
		{"mismatch", func(src *commitlog.Log) []byte {
			v, _ := src.Read(0, 5000)
			defer v.Release()
			b := transport.AppendFrame(nil, 0, v.Data)
			return transport.AppendFrame(b, 4000, v.Data[:100])
		}, "not equal to slave max offset"},
		{"oversized", func(*commitlog.Log) []byte {
			var h [transport.HeaderSize]byte
			transport.PutHeader(h[:], 0, transport.MaxBodyLimit+1)
			return h[:]
		}, "malformed frame"},
		{"cut body", func(src *commitlog.Log) []byte {
			v, _ := src.Read(0, 20000)
			defer v.Release()
			return transport.AppendFrame(nil, 0, v.Data)[:15000]
		}, "master closed the connection"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src, _, s, c := directSetup(t, false)
			if _, err := c.Write(tc.bytes(src)); err != nil {
				t.Fatal(err)
			}
			if tc.name == "cut body" {
				c.(*net.TCPConn).CloseWrite()
			}
			// The slave closes: the fake master reads reports, then EOF.
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			_, err := io.Copy(io.Discard, c)
			if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
				t.Fatalf("reading until the slave closes: %v", err)
			}
			deadline := time.Now().Add(20 * time.Second)
			for !strings.Contains(s.Status().LastError, tc.want) {
				if time.Now().After(deadline) {
					t.Fatalf("last error %q, want %q", s.Status().LastError, tc.want)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}
