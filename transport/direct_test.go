package transport

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
)

// vecReader serves chunks like chunkReader, but one ReadVec fills as many
// of the given buffers as the current chunk covers, as readv does. It
// counts calls.
type vecReader struct {
	chunkReader
	calls    int
	vecCalls int   // calls with more than one non-empty buffer
	direct   int64 // bytes read into the first buffer of such calls: a direct reader's body bytes that skipped its staging buffer
	maxChunk int   // 0: no limit; else at most this many bytes per call
}

func (v *vecReader) ReadVec(bufs [][]byte) (int, error) {
	n, err := v.readVec(bufs)
	if len(bufs) > 1 && len(bufs[0]) > 0 && len(bufs[1]) > 0 {
		v.direct += int64(min(n, len(bufs[0])))
	}
	return n, err
}

func (v *vecReader) readVec(bufs [][]byte) (int, error) {
	v.calls++
	nonEmpty := 0
	for _, b := range bufs {
		if len(b) > 0 {
			nonEmpty++
		}
	}
	if nonEmpty > 1 {
		v.vecCalls++
	}
	total := 0
	for _, b := range bufs {
		if v.maxChunk > 0 && len(b) > v.maxChunk-total {
			b = b[:v.maxChunk-total]
		}
		for len(b) > 0 {
			for len(v.chunks) > 0 && len(v.chunks[0]) == 0 {
				v.chunks = v.chunks[1:]
			}
			if len(v.chunks) == 0 {
				if total > 0 {
					return total, nil
				}
				if v.err != nil {
					return 0, v.err
				}
				return 0, io.EOF
			}
			n := copy(b, v.chunks[0])
			v.chunks[0] = v.chunks[0][n:]
			b = b[n:]
			total += n
			if len(v.chunks[0]) == 0 {
				// A chunk boundary ends the call, as a drained socket does.
				return total, nil
			}
		}
	}
	return total, nil
}

// readAllDirect reads every frame, each body with io.ReadFull into a fresh
// buffer of exactly its size (as AppendAtFrom does), or in pieces of step
// bytes when step > 0.
func readAllDirect(t *testing.T, dr *DirectReader, step int) ([]testFrame, error) {
	t.Helper()
	var out []testFrame
	for {
		h, err := dr.Next()
		if err != nil {
			return out, err
		}
		body := make([]byte, h.Size)
		if step <= 0 {
			if _, err := io.ReadFull(dr, body); err != nil {
				return out, err
			}
		} else {
			for got := 0; got < h.Size; {
				n, err := dr.Read(body[got:min(got+step, h.Size)])
				got += n
				if err != nil {
					return out, err
				}
			}
		}
		if n, err := dr.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("Read after the body = %d, %v; want 0, io.EOF", n, err)
		}
		if h.Size == 0 {
			body = nil
		}
		out = append(out, testFrame{h.Offset, body})
	}
}

// directFrames mixes small frames with bodies large enough to be read
// straight into the caller's buffer.
func directFrames() []testFrame {
	fs := sampleFrames()
	off := fs[len(fs)-1].off
	for _, n := range []int{directMin, 9000, 1, 32 << 10, 0, directMin - 1, 5000} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(int(off) + i*13)
		}
		if n == 0 {
			b = nil
		}
		fs = append(fs, testFrame{off, b})
		off += int64(n)
	}
	return fs
}

func TestDirectReaderSplitAnywhere(t *testing.T) {
	check := func(name string, want []testFrame, chunks [][]byte, step int) {
		t.Helper()
		dr := NewDirectReader(&vecReader{chunkReader: chunkReader{chunks: chunks}}, 0)
		got, err := readAllDirect(t, dr, step)
		if err != io.EOF {
			t.Fatalf("%s: error %v, want io.EOF", name, err)
		}
		if !equalFrames(got, want) {
			t.Fatalf("%s: frames differ", name)
		}
	}
	singles := func(b []byte) [][]byte {
		var out [][]byte
		for i := range b {
			out = append(out, b[i:i+1:i+1])
		}
		return out
	}
	all := directFrames()
	stream := encodeFrames(all)
	check("whole", all, [][]byte{stream}, 0)
	check("whole, pieces of 1000", all, [][]byte{stream}, 1000)
	check("one byte per read", all, singles(stream), 0)
	check("one byte per read, pieces of 3", all, singles(stream), 3)
	// Split in two at every byte: the sample frames and one body just
	// large enough to be read directly.
	small := append(sampleFrames(), testFrame{150, bytes.Repeat([]byte{9}, directMin+3)}, testFrame{150 + directMin + 3, []byte{1, 2}})
	stream = encodeFrames(small)
	for k := 1; k < len(stream); k++ {
		check("split", small, splitAt(stream, k), 0)
	}
}

// TestDirectReaderVectored: while the stream keeps up, each large body
// costs one vectored read that also brings the next header, and nothing
// of it passes through the staging buffer.
func TestDirectReaderVectored(t *testing.T) {
	var fs []testFrame
	for i := range 20 {
		b := bytes.Repeat([]byte{byte(i)}, 32<<10)
		fs = append(fs, testFrame{int64(i) * 32 << 10, b})
	}
	stream := encodeFrames(fs)
	// A stream that is always ahead of the reader.
	vr := &vecReader{chunkReader: chunkReader{chunks: [][]byte{stream}}}
	dr := NewDirectReader(vr, 0)
	got, err := readAllDirect(t, dr, 0)
	if err != io.EOF || !equalFrames(got, fs) {
		t.Fatalf("frames differ (error %v)", err)
	}
	// The first read fills the staging buffer (the first frame and the
	// start of the second); then one vectored read per frame, and a last
	// one that meets io.EOF.
	if vr.calls > len(fs)+2 || vr.vecCalls < len(fs)-2 {
		t.Fatalf("%d reads (%d vectored) for %d frames", vr.calls, vr.vecCalls, len(fs))
	}
	// Body bytes that did not arrive by a vectored read went through the
	// staging buffer.
	bodies := int64(len(fs) * 32 << 10)
	if staged := bodies - vr.direct; staged > int64(len(fs[0].body))*2 {
		t.Fatalf("%d body bytes went through the staging buffer", staged)
	}
	// A stream that pauses at every frame boundary (the reader is faster
	// than the master): after the first frame, a pause costs one header
	// read, and the bodies still go straight to their destination.
	var chunks [][]byte
	for i := 0; i < len(stream); i += HeaderSize + 32<<10 {
		chunks = append(chunks, stream[i:i+HeaderSize+32<<10])
	}
	vr = &vecReader{chunkReader: chunkReader{chunks: chunks}}
	dr = NewDirectReader(vr, 0)
	got, err = readAllDirect(t, dr, 0)
	if err != io.EOF || !equalFrames(got, fs) {
		t.Fatalf("paused stream: frames differ (error %v)", err)
	}
	if staged := bodies - vr.direct; staged > int64(len(fs[0].body)) {
		t.Fatalf("paused stream: %d body bytes went through the staging buffer", staged)
	}
}

func TestDirectReaderSmallFramesBatched(t *testing.T) {
	var fs []testFrame
	off := int64(0)
	for i := range 200 {
		b := bytes.Repeat([]byte{byte(i)}, 100)
		fs = append(fs, testFrame{off, b})
		off += 100
	}
	vr := &vecReader{chunkReader: chunkReader{chunks: [][]byte{encodeFrames(fs)}}}
	got, err := readAllDirect(t, NewDirectReader(vr, 0), 0)
	if err != io.EOF || !equalFrames(got, fs) {
		t.Fatalf("frames differ (error %v)", err)
	}
	if vr.calls > 3 {
		t.Fatalf("%d reads for 200 small frames in one chunk", vr.calls)
	}
}

func TestDirectReaderErrors(t *testing.T) {
	big := bytes.Repeat([]byte{7}, 3*directMin)
	frame := AppendFrame(nil, 40, big)
	cases := []struct {
		name   string
		stream []byte
		max    int
		want   error
		header bool // the error comes from Next (else from the body read)
	}{
		{"clean end", nil, 0, io.EOF, true},
		{"end in header", frame[:5], 0, ErrTruncated, true},
		{"end in staged body", frame[:HeaderSize+10], 0, ErrTruncated, false},
		{"end in direct body", frame[:len(frame)-1], 0, ErrTruncated, false},
		{"negative size", AppendFrame(nil, 0, nil)[:8], 0, ErrNegativeSize, true},
		{"too large", frame, directMin, ErrFrameTooLarge, true},
		{"negative offset", AppendFrame(nil, -5, []byte{1}), 0, ErrNegativeOffset, true},
	}
	cases[4].stream = append(bytes.Clone(cases[4].stream), 0xff, 0xff, 0xff, 0xff)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dr := NewDirectReader(&vecReader{chunkReader: chunkReader{chunks: [][]byte{bytes.Clone(tc.stream)}}}, tc.max)
			h, err := dr.Next()
			if !tc.header {
				if err != nil {
					t.Fatalf("Next: %v", err)
				}
				_, err = io.ReadFull(dr, make([]byte, h.Size))
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if tc.want == ErrTruncated && (errors.Is(err, io.EOF) || !errors.Is(err, io.ErrUnexpectedEOF)) {
				t.Fatalf("truncation %v must match io.ErrUnexpectedEOF, not io.EOF", err)
			}
			if tc.want == io.EOF && err != io.EOF {
				t.Fatalf("clean end %v, want bare io.EOF", err)
			}
			var he *HeaderError
			if errors.As(err, &he) {
				if _, err2 := dr.Next(); err2 != err {
					t.Fatalf("protocol error not sticky: %v then %v", err, err2)
				}
			}
		})
	}
}

// TestDirectReaderResumesAfterTimeout: a deadline error in the middle of a
// header or a body is returned, wrapped, and reading goes on after it.
func TestDirectReaderResumesAfterTimeout(t *testing.T) {
	want := directFrames()
	stream := encodeFrames(want)
	for _, cut := range []int{5, HeaderSize + 50, len(stream) - 2000, len(stream) - 1} {
		tr := &timeoutOnce{data: stream, cut: cut}
		dr := NewDirectReader(tr, 0)
		var got []testFrame
		timeouts := 0
		for {
			h, err := dr.Next()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				timeouts++
				continue
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("cut %d: Next: %v", cut, err)
			}
			body := make([]byte, h.Size)
			for got := 0; got < h.Size; {
				n, err := dr.Read(body[got:])
				got += n
				if errors.Is(err, os.ErrDeadlineExceeded) {
					timeouts++
					continue
				}
				if err != nil {
					t.Fatalf("cut %d: Read: %v", cut, err)
				}
			}
			if h.Size == 0 {
				body = nil
			}
			got = append(got, testFrame{h.Offset, body})
		}
		if timeouts != 1 || !equalFrames(got, want) {
			t.Fatalf("cut %d: %d timeouts, frames equal %v", cut, timeouts, equalFrames(got, want))
		}
	}
}

// timeoutOnce serves data, stopping once at cut with a deadline error.
type timeoutOnce struct {
	data []byte
	pos  int
	cut  int
	done bool
}

func (r *timeoutOnce) ReadVec(bufs [][]byte) (int, error) {
	limit := len(r.data)
	if !r.done {
		if r.pos == r.cut {
			r.done = true
			return 0, os.ErrDeadlineExceeded
		}
		limit = r.cut
	}
	if r.pos == len(r.data) {
		return 0, io.EOF
	}
	total := 0
	for _, b := range bufs {
		n := copy(b, r.data[r.pos:limit])
		r.pos += n
		total += n
	}
	return total, nil
}

func TestDirectReaderMisuse(t *testing.T) {
	frame := AppendFrame(nil, 0, []byte("hello"))
	dr := NewDirectReader(&vecReader{chunkReader: chunkReader{chunks: [][]byte{frame}}}, 0)
	if _, err := dr.Next(); err != nil {
		t.Fatal(err)
	}
	if dr.Remaining() != 5 {
		t.Fatalf("Remaining %d, want 5", dr.Remaining())
	}
	if _, err := dr.Next(); !errors.Is(err, ErrBodyPending) {
		t.Fatalf("Next with a pending body: %v", err)
	}
	if n, err := dr.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) = %d, %v", n, err)
	}
	bad := NewDirectReader(badCount{}, 0)
	if _, err := bad.Next(); err == nil {
		t.Fatal("an invalid read count was accepted")
	}
}

type badCount struct{}

func (badCount) ReadVec(bufs [][]byte) (int, error) { return len(bufs[0]) + 1, nil }

func TestReaderVec(t *testing.T) {
	r := ReaderVec{R: bytes.NewReader([]byte("abcdef"))}
	a, b := make([]byte, 2), make([]byte, 10)
	n, err := r.ReadVec([][]byte{nil, a, b})
	if n != 2 || err != nil || string(a) != "ab" {
		t.Fatalf("ReadVec = %d, %v, %q", n, err, a)
	}
	stream := encodeFrames(directFrames())
	got, err := readAllDirect(t, NewDirectReader(ReaderVec{R: bytes.NewReader(stream)}, 0), 0)
	if err != io.EOF || !equalFrames(got, directFrames()) {
		t.Fatalf("frames through ReaderVec differ (error %v)", err)
	}
}

func BenchmarkDirectReader(b *testing.B) {
	var fs []testFrame
	for i := range 64 {
		fs = append(fs, testFrame{int64(i) * DefaultBatchSize, make([]byte, DefaultBatchSize)})
	}
	stream := encodeFrames(fs)
	dst := make([]byte, DefaultBatchSize)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		dr := NewDirectReader(ReaderVec{R: bytes.NewReader(stream)}, 0)
		for {
			h, err := dr.Next()
			if err != nil {
				break
			}
			if _, err := io.ReadFull(dr, dst[:h.Size]); err != nil {
				b.Fatal(err)
			}
		}
	}
}
