package transport

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"testing/iotest"
)

func reports(vs ...int64) []byte {
	var b []byte
	for _, v := range vs {
		var r [ReportSize]byte
		PutReport(r[:], v)
		b = append(b, r[:]...)
	}
	return b
}

// modelReports applies the master reader rule to the given reads: for each
// read that completes at least one aligned value, the last completed value.
func modelReports(stream []byte, readLens []int) []int64 {
	var out []int64
	pos := 0
	for _, n := range readLens {
		end := pos + n
		if end/ReportSize > pos/ReportSize {
			last := end / ReportSize * ReportSize
			out = append(out, ParseReport(stream[last-ReportSize:]))
		}
		pos = end
	}
	return out
}

func readAllReports(rr *ReportReader) ([]int64, error) {
	var out []int64
	for {
		v, err := rr.Next()
		if err != nil {
			return out, err
		}
		out = append(out, v)
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestReportWriterBytes(t *testing.T) {
	var buf bytes.Buffer
	rw := NewReportWriter(&buf)
	if err := rw.WriteReport(0x0102030405060708); err != nil {
		t.Fatal(err)
	}
	if err := rw.WriteReport(0); err != nil {
		t.Fatal(err)
	}
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 0}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("wrote % x", buf.Bytes())
	}
	if err := rw.WriteReport(-1); !errors.Is(err, ErrNegativeOffset) || buf.Len() != 16 {
		t.Fatalf("negative report: %v", err)
	}
	if err := NewReportWriter(failWriter{os.ErrDeadlineExceeded}).WriteReport(1); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write error not wrapped: %v", err)
	}
}

func TestAckWriterBytes(t *testing.T) {
	var buf bytes.Buffer
	aw := NewAckWriter(&buf)
	for _, v := range []int64{0x0102030405060708, 0} {
		if err := aw.WriteReport(v); err != nil {
			t.Fatal(err)
		}
	}
	want := AppendAck(AppendAck(nil, 0x0102030405060708), 0)
	if !bytes.Equal(buf.Bytes(), want) || buf.Len() != 2*AckSize {
		t.Fatalf("wrote % x, want % x", buf.Bytes(), want)
	}
	if err := aw.WriteReport(-1); !errors.Is(err, ErrNegativeOffset) || buf.Len() != 2*AckSize {
		t.Fatalf("negative ack: %v", err)
	}
	aw = NewAckWriter(io.Discard)
	if a := testing.AllocsPerRun(1000, func() {
		if err := aw.WriteReport(12345); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("an ack writer's WriteReport: %v allocs", a)
	}
}

func TestReportLastValuePerRead(t *testing.T) {
	stream := reports(100, 200, 300, 400, 500)
	r := &chunkReader{chunks: splitAt(stream, 24, 40)} // reads: [100 200 300] [400 500]
	got, err := readAllReports(NewReportReader(r))
	if err != io.EOF || !equalInts(got, []int64{300, 500}) {
		t.Fatalf("got %v %v, want [300 500] EOF", got, err)
	}
}

func TestReportAlignmentAcrossReads(t *testing.T) {
	stream := reports(11, 22, 33, 44)
	// reads of 5, 5, 6, 3, 13 bytes: 11 completes in read 2, 22 in read 3,
	// read 4 completes nothing, read 5 completes 33 and 44.
	r := &chunkReader{chunks: splitAt(stream, 5, 10, 16, 19)}
	got, err := readAllReports(NewReportReader(r))
	if err != io.EOF || !equalInts(got, []int64{11, 22, 44}) {
		t.Fatalf("got %v %v", got, err)
	}
}

func TestReportSplitAtEveryByte(t *testing.T) {
	stream := reports(1, 1<<40, 3, 1<<62, 5, 6, 7)
	for a := 0; a <= len(stream); a++ {
		for b := a; b <= len(stream); b++ {
			r := &chunkReader{chunks: splitAt(bytes.Clone(stream), a, b)}
			got, err := readAllReports(NewReportReader(r))
			want := modelReports(stream, []int{a, b - a, len(stream) - b})
			if err != io.EOF || !equalInts(got, want) {
				t.Fatalf("cuts %d,%d: got %v %v, want %v", a, b, got, err, want)
			}
		}
	}
	got, err := readAllReports(NewReportReader(iotest.OneByteReader(bytes.NewReader(stream))))
	if err != io.EOF || !equalInts(got, []int64{1, 1 << 40, 3, 1 << 62, 5, 6, 7}) {
		t.Fatalf("one byte per read: %v %v", got, err)
	}
}

// A read larger than the reader's buffer is consumed in buffer-sized reads;
// alignment holds.
func TestReportLongRead(t *testing.T) {
	vs := make([]int64, ReportReadBufferSize/ReportSize*3)
	for i := range vs {
		vs[i] = int64(i) * 10
	}
	stream := append(reports(vs...), 1, 2, 3) // 3 bytes of a torn tail
	rr := NewReportReader(&chunkReader{chunks: [][]byte{stream}})
	got, err := readAllReports(rr)
	per := ReportReadBufferSize / ReportSize
	want := []int64{vs[per-1], vs[2*per-1], vs[3*per-1]}
	if !equalInts(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if !errors.Is(err, ErrTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		t.Fatalf("torn tail: %v", err)
	}
	if rr.StreamBytes() != int64(len(stream)) {
		t.Fatalf("StreamBytes %d", rr.StreamBytes())
	}
}

func TestReportEOF(t *testing.T) {
	stream := reports(8, 16)
	for cut := 0; cut <= len(stream); cut++ {
		_, err := readAllReports(NewReportReader(bytes.NewReader(stream[:cut])))
		if cut%ReportSize == 0 {
			if err != io.EOF {
				t.Fatalf("cut %d: %v, want bare io.EOF", cut, err)
			}
			continue
		}
		if !errors.Is(err, ErrTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			t.Fatalf("cut %d: %v", cut, err)
		}
	}
	// Data and io.EOF from the same Read: the value first, then EOF.
	got, err := readAllReports(NewReportReader(&dataEOFReader{stream}))
	if err != io.EOF || !equalInts(got, []int64{16}) {
		t.Fatalf("data+EOF: %v %v", got, err)
	}
}

func TestReportNegative(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks [][]byte
		pos    int64
	}{
		{"last in read", [][]byte{reports(5, -1)}, 8},
		{"superseded in read", [][]byte{reports(-7, 5)}, 0},
		{"completed across reads", splitAt(reports(5, -2), 11), 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr := NewReportReader(&chunkReader{chunks: tc.chunks})
			got, err := readAllReports(rr)
			var re *ReportError
			if !errors.Is(err, ErrNegativeOffset) || !errors.As(err, &re) || re.Stream != tc.pos {
				t.Fatalf("got %v %v", got, err)
			}
			if _, err2 := rr.Next(); err2 != err {
				t.Fatalf("not sticky: %v", err2)
			}
		})
	}
}

func TestReportReadErrorResumes(t *testing.T) {
	stream := reports(42, 43)
	r := &scriptReader{steps: []step{
		{data: stream[:3]},
		{err: os.ErrDeadlineExceeded},
		{data: stream[3:12]},
		{err: os.ErrDeadlineExceeded},
		{data: stream[12:]},
	}}
	rr := NewReportReader(r)
	var got []int64
	timeouts := 0
	for {
		v, err := rr.Next()
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
		got = append(got, v)
	}
	if timeouts != 2 || !equalInts(got, []int64{42, 43}) {
		t.Fatalf("timeouts %d got %v", timeouts, got)
	}
}

func TestReportZeroAllocs(t *testing.T) {
	rr := NewReportReader(&loopReader{b: reports(1, 2, 3)[:20]}) // misaligned loop: 20-byte cycle
	if a := testing.AllocsPerRun(1000, func() {
		if _, err := rr.Next(); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("ReportReader.Next: %v allocs", a)
	}
	rw := NewReportWriter(io.Discard)
	if a := testing.AllocsPerRun(1000, func() {
		if err := rw.WriteReport(12345); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("ReportWriter.WriteReport: %v allocs", a)
	}
}
