package transport

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"testing/iotest"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// chunkReader returns its chunks one per Read (a chunk longer than the
// caller's buffer is continued on the next Read), then err (io.EOF if nil).
type chunkReader struct {
	chunks [][]byte
	err    error
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.chunks) > 0 && len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	if len(c.chunks) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	return n, nil
}

// splitAt cuts b at the given ascending positions.
func splitAt(b []byte, cuts ...int) [][]byte {
	var out [][]byte
	prev := 0
	for _, c := range cuts {
		out = append(out, b[prev:c])
		prev = c
	}
	return append(out, b[prev:])
}

type testFrame struct {
	off  int64
	body []byte
}

func sampleFrames() []testFrame {
	body := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = seed + byte(i*7)
		}
		return b
	}
	return []testFrame{
		{0, body(100, 1)},
		{100, body(1, 2)},
		{101, nil}, // heartbeat
		{101, body(37, 3)},
		{138, body(12, 4)},
		{150, nil},
	}
}

func encodeFrames(fs []testFrame) []byte {
	var b []byte
	for _, f := range fs {
		b = AppendFrame(b, f.off, f.body)
	}
	return b
}

func readAllFrames(t *testing.T, fr *FrameReader) ([]testFrame, error) {
	t.Helper()
	var out []testFrame
	for {
		f, err := fr.Next()
		if err != nil {
			return out, err
		}
		out = append(out, testFrame{f.Offset, bytes.Clone(f.Body)})
	}
}

func equalFrames(a, b []testFrame) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].off != b[i].off || !bytes.Equal(a[i].body, b[i].body) {
			return false
		}
	}
	return true
}

func TestFrameHeaderBytes(t *testing.T) {
	var b [HeaderSize]byte
	PutHeader(b[:], 0x0102030405060708, 0x0a0b0c0d)
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 0x0b, 0x0c, 0x0d}
	if !bytes.Equal(b[:], want) {
		t.Fatalf("header % x, want % x", b, want)
	}
	off, size := ParseHeader(b[:])
	if off != 0x0102030405060708 || size != 0x0a0b0c0d {
		t.Fatalf("ParseHeader = %x %x", off, size)
	}
	PutHeader(b[:], -1, -2)
	if off, size := ParseHeader(b[:]); off != -1 || size != -2 {
		t.Fatalf("ParseHeader negative = %d %d", off, size)
	}
}

func TestFrameWriterBytes(t *testing.T) {
	var buf bytes.Buffer
	fw := NewFrameWriter(&buf)
	if err := fw.WriteFrame(4096, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	if err := fw.WriteFrame(4099, nil); err != nil { // heartbeat
		t.Fatal(err)
	}
	want := []byte{
		0, 0, 0, 0, 0, 0, 0x10, 0x00, 0, 0, 0, 3, 'a', 'b', 'c',
		0, 0, 0, 0, 0, 0, 0x10, 0x03, 0, 0, 0, 0,
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("wrote % x\nwant  % x", buf.Bytes(), want)
	}
}

func TestFrameWriterRejects(t *testing.T) {
	var buf bytes.Buffer
	fw := NewFrameWriter(&buf)
	if err := fw.WriteFrame(-1, []byte("x")); !errors.Is(err, ErrNegativeOffset) {
		t.Fatalf("negative offset: %v", err)
	}
	if err := fw.WriteFrame(0, make([]byte, MaxBodyLimit+1)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	if buf.Len() != 0 {
		t.Fatalf("rejected frames wrote %d bytes", buf.Len())
	}
	if err := fw.WriteFrame(0, make([]byte, MaxBodyLimit)); err != nil {
		t.Fatalf("MaxBodyLimit body: %v", err)
	}
	if buf.Len() != 4<<20 {
		t.Fatalf("largest frame is %d bytes, want 4 MiB", buf.Len())
	}
}

type failWriter struct{ err error }

func (f failWriter) Write(p []byte) (int, error) { return 0, f.err }

func TestFrameWriterWrapsWriteError(t *testing.T) {
	fw := NewFrameWriter(failWriter{os.ErrDeadlineExceeded})
	for _, body := range [][]byte{nil, []byte("x")} {
		err := fw.WriteFrame(7, body)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("WriteFrame error %v does not wrap the cause", err)
		}
	}
}

func TestFrameRoundTrip(t *testing.T) {
	fs := sampleFrames()
	var buf bytes.Buffer
	fw := NewFrameWriter(&buf)
	for _, f := range fs {
		if err := fw.WriteFrame(f.off, f.body); err != nil {
			t.Fatal(err)
		}
	}
	got, err := readAllFrames(t, NewFrameReader(&buf, 0))
	if err != io.EOF {
		t.Fatalf("end of stream: %v, want bare io.EOF", err)
	}
	if !equalFrames(got, fs) {
		t.Fatalf("frames differ: %v", got)
	}
}

// Every single split position, and one byte per read.
func TestFrameSplitAtEveryByte(t *testing.T) {
	fs := sampleFrames()
	stream := encodeFrames(fs)
	for cut := 0; cut <= len(stream); cut++ {
		for _, bufSize := range []int{0, HeaderSize + 100} { // default and tight buffers
			fr := NewFrameReaderSize(&chunkReader{chunks: splitAt(bytes.Clone(stream), cut)}, 100, bufSize)
			got, err := readAllFrames(t, fr)
			if err != io.EOF || !equalFrames(got, fs) {
				t.Fatalf("cut %d buf %d: %d frames, err %v", cut, bufSize, len(got), err)
			}
		}
	}
	for _, bufSize := range []int{0, HeaderSize + 100} {
		fr := NewFrameReaderSize(iotest.OneByteReader(bytes.NewReader(stream)), 100, bufSize)
		got, err := readAllFrames(t, fr)
		if err != io.EOF || !equalFrames(got, fs) {
			t.Fatalf("one byte per read, buf %d: %d frames, err %v", bufSize, len(got), err)
		}
	}
	// Every pair of cuts.
	for a := 1; a < len(stream); a++ {
		for b := a; b < len(stream); b++ {
			fr := NewFrameReaderSize(&chunkReader{chunks: splitAt(bytes.Clone(stream), a, b)}, 100, HeaderSize+100)
			got, err := readAllFrames(t, fr)
			if err != io.EOF || !equalFrames(got, fs) {
				t.Fatalf("cuts %d,%d: %d frames, err %v", a, b, len(got), err)
			}
		}
	}
}

// A reader whose Read returns data and io.EOF together.
type dataEOFReader struct{ b []byte }

func (r *dataEOFReader) Read(p []byte) (int, error) {
	n := copy(p, r.b)
	r.b = r.b[n:]
	if len(r.b) == 0 {
		return n, io.EOF
	}
	return n, nil
}

func TestFrameDataWithEOF(t *testing.T) {
	fs := sampleFrames()
	got, err := readAllFrames(t, NewFrameReader(&dataEOFReader{encodeFrames(fs)}, 0))
	if err != io.EOF || !equalFrames(got, fs) {
		t.Fatalf("%d frames, err %v", len(got), err)
	}
}

func TestFrameEOFMidFrame(t *testing.T) {
	fs := sampleFrames()
	stream := encodeFrames(fs)
	boundaries := map[int]bool{0: true}
	n := 0
	for _, f := range fs {
		n += HeaderSize + len(f.body)
		boundaries[n] = true
	}
	for cut := 0; cut <= len(stream); cut++ {
		fr := NewFrameReader(bytes.NewReader(stream[:cut]), 0)
		_, err := readAllFrames(t, fr)
		if boundaries[cut] {
			if err != io.EOF {
				t.Fatalf("cut %d on a boundary: %v, want bare io.EOF", cut, err)
			}
			continue
		}
		if !errors.Is(err, ErrTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut %d: %v, want ErrTruncated and io.ErrUnexpectedEOF", cut, err)
		}
		if err == io.ErrUnexpectedEOF || errors.Is(err, io.EOF) {
			t.Fatalf("cut %d: %v must be wrapped and distinct from io.EOF", cut, err)
		}
		if _, err2 := fr.Next(); err2 != err {
			t.Fatalf("cut %d: truncation not sticky: %v", cut, err2)
		}
	}
}

func TestFrameHeaderRejects(t *testing.T) {
	hdr := func(off int64, size int32) []byte {
		b := make([]byte, HeaderSize)
		PutHeader(b, off, size)
		return b
	}
	cases := []struct {
		name    string
		stream  []byte
		maxBody int
		want    error
	}{
		{"oversize", hdr(0, 1025), 1024, ErrFrameTooLarge},
		{"oversize max int32", hdr(0, 1<<31-1), 0, ErrFrameTooLarge},
		{"oversize default limit", hdr(0, MaxBodyLimit+1), 0, ErrFrameTooLarge},
		{"negative size", hdr(0, -1), 1024, ErrNegativeSize},
		{"min int32 size", hdr(0, -1<<31), 1024, ErrNegativeSize},
		{"negative offset", hdr(-5, 10), 1024, ErrNegativeOffset},
		{"negative offset heartbeat", hdr(-1<<63, 0), 1024, ErrNegativeOffset},
		{"after a good frame", append(AppendFrame(nil, 0, []byte("ok")), hdr(2, 2000)...), 1024, ErrFrameTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Only the header is available; the reader must not wait for
			// the body before rejecting it: the stream blocks forever after.
			r := &chunkReader{chunks: [][]byte{tc.stream}, err: errors.New("test: read past the header")}
			fr := NewFrameReaderSize(r, tc.maxBody, 0)
			var err error
			for err == nil {
				_, err = fr.Next()
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			var he *HeaderError
			if !errors.As(err, &he) || he.Err != tc.want {
				t.Fatalf("error %v is not a *HeaderError", err)
			}
			if _, err2 := fr.Next(); !errors.Is(err2, tc.want) {
				t.Fatalf("not sticky: %v", err2)
			}
			if len(fr.buf) != max(HeaderSize+fr.maxBody, 0) {
				t.Fatalf("buffer is %d bytes, want %d", len(fr.buf), HeaderSize+fr.maxBody)
			}
		})
	}
}

func TestFrameMaxBodyBoundary(t *testing.T) {
	body := bytes.Repeat([]byte{0xab}, 1024)
	fr := NewFrameReaderSize(bytes.NewReader(AppendFrame(nil, 9, body)), 1024, 0)
	f, err := fr.Next()
	if err != nil || f.Offset != 9 || !bytes.Equal(f.Body, body) {
		t.Fatalf("frame of exactly maxBody: %v %v", f.Offset, err)
	}
	if got := NewFrameReader(nil, -1).MaxBody(); got != MaxBodyLimit {
		t.Fatalf("maxBody -1 -> %d", got)
	}
	if got := NewFrameReader(nil, MaxBodyLimit+100).MaxBody(); got != MaxBodyLimit {
		t.Fatalf("maxBody above the limit -> %d", got)
	}
	if got := len(NewFrameReader(nil, DefaultBatchSize).buf); got != DefaultReadBufferSize {
		t.Fatalf("default buffer %d", got)
	}
}

// A read error (a deadline) in the middle of a frame keeps the buffered
// bytes: the next call resumes.
func TestFrameReadErrorResumes(t *testing.T) {
	stream := encodeFrames(sampleFrames())
	r := &scriptReader{steps: []step{
		{data: stream[:5]},
		{err: os.ErrDeadlineExceeded},
		{data: stream[5:20]},
		{err: os.ErrDeadlineExceeded},
		{data: stream[20:]},
	}}
	fr := NewFrameReader(r, 0)
	var got []testFrame
	timeouts := 0
	for {
		f, err := fr.Next()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			timeouts++
			continue
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, testFrame{f.Offset, bytes.Clone(f.Body)})
	}
	if timeouts != 2 || !equalFrames(got, sampleFrames()) {
		t.Fatalf("timeouts %d frames %d", timeouts, len(got))
	}
}

type step struct {
	data []byte
	err  error
}

type scriptReader struct{ steps []step }

func (s *scriptReader) Read(p []byte) (int, error) {
	if len(s.steps) == 0 {
		return 0, io.EOF
	}
	st := &s.steps[0]
	if st.err != nil {
		s.steps = s.steps[1:]
		return 0, st.err
	}
	n := copy(p, st.data)
	st.data = st.data[n:]
	if len(st.data) == 0 {
		s.steps = s.steps[1:]
	}
	return n, nil
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { return 0, nil }

func TestFrameNoProgress(t *testing.T) {
	if _, err := NewFrameReader(zeroReader{}, 0).Next(); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("got %v", err)
	}
	if _, err := NewReportReader(zeroReader{}).Next(); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("got %v", err)
	}
}

// loopReader serves the same stream forever without allocating.
type loopReader struct {
	b   []byte
	pos int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], l.b[l.pos:])
		n += c
		l.pos = (l.pos + c) % len(l.b)
	}
	return n, nil
}

func TestFrameZeroAllocs(t *testing.T) {
	stream := encodeFrames(sampleFrames())
	fr := NewFrameReaderSize(&loopReader{b: stream}, 1024, 4096)
	if a := testing.AllocsPerRun(1000, func() {
		if _, err := fr.Next(); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("FrameReader.Next: %v allocs per frame", a)
	}
	fw := NewFrameWriter(io.Discard)
	body := make([]byte, DefaultBatchSize)
	if a := testing.AllocsPerRun(1000, func() {
		if err := fw.WriteFrame(1, body); err != nil {
			t.Fatal(err)
		}
		if err := fw.WriteFrame(1, nil); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("FrameWriter.WriteFrame: %v allocs", a)
	}
	// A rejected header allocates nothing either.
	bad := make([]byte, HeaderSize)
	PutHeader(bad, 0, 1<<30)
	var sink error
	if a := testing.AllocsPerRun(100, func() {
		fr := FrameReader{r: bytes.NewReader(bad), buf: fr.buf, maxBody: 1024, window: len(fr.buf)}
		_, sink = fr.Next()
	}); a > 2 { // the FrameReader and bytes.Reader values themselves escape
		t.Fatalf("rejecting a header: %v allocs", a)
	}
	if !errors.Is(sink, ErrFrameTooLarge) {
		t.Fatal(sink)
	}
}

func TestFrameHeaderErrorMessage(t *testing.T) {
	b := make([]byte, HeaderSize)
	PutHeader(b, 77, 5000)
	_, err := NewFrameReaderSize(bytes.NewReader(b), 4096, 0).Next()
	want := "transport: frame too large: offset 77 size 5000 limit 4096"
	if err == nil || err.Error() != want {
		t.Fatalf("got %q, want %q", err, want)
	}
}

// Long streams through the default 4 MiB buffer stay within the read
// window (or twice a large frame), compacting at its end, and come out
// intact.
func TestFrameReadWindow(t *testing.T) {
	for _, tc := range []struct {
		name    string
		maxBody int
		size    int // frame bodies are size..size+36 bytes
		count   int
	}{
		{"small frames, batch limit", DefaultBatchSize, 1000, 1000},
		{"small frames, default limit", 0, 1000, 1000},
		{"large frames", 0, 200 << 10, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fs []testFrame
			var stream []byte
			var off int64
			for i := range tc.count {
				body := bytes.Repeat([]byte{byte(i)}, tc.size+i%37)
				fs = append(fs, testFrame{off, body})
				stream = AppendFrame(stream, off, body)
				off += int64(len(body))
			}
			var chunks [][]byte
			for rest, i := stream, 0; len(rest) > 0; i++ {
				n := min(len(rest), 1+(i*7919)%70000)
				chunks = append(chunks, rest[:n])
				rest = rest[n:]
			}
			fr := NewFrameReader(&chunkReader{chunks: chunks}, tc.maxBody)
			if fr.window != readWindow || len(fr.buf) != DefaultReadBufferSize {
				t.Fatalf("window %d buffer %d", fr.window, len(fr.buf))
			}
			bound := max(readWindow, 2*(HeaderSize+tc.size+36))
			var got []testFrame
			for {
				f, err := fr.Next()
				if fr.end > bound {
					t.Fatalf("buffered up to %d, past %d", fr.end, bound)
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, testFrame{f.Offset, bytes.Clone(f.Body)})
			}
			if !equalFrames(got, fs) {
				t.Fatalf("%d frames back, want %d", len(got), len(fs))
			}
		})
	}
}
