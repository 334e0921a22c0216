package transport

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// fuzzReader serves data in reads whose sizes cycle through 1..chunk
// (chunk 0: everything at once) and records each read's length.
type fuzzReader struct {
	data  []byte
	chunk int
	i     int
	reads []int
}

func (r *fuzzReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := len(r.data)
	if r.chunk > 0 {
		n = r.i%r.chunk + 1
		r.i++
	}
	n = min(n, len(p), len(r.data))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	r.reads = append(r.reads, n)
	return n, nil
}

func FuzzFrameReader(f *testing.F) {
	f.Add(encodeFrames(sampleFrames()), uint16(100), uint8(0))
	f.Add(encodeFrames(sampleFrames()), uint16(100), uint8(5))
	f.Add(AppendFrame(nil, 0, nil), uint16(0), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, maxBody uint16, chunk uint8) {
		r := &fuzzReader{data: bytes.Clone(data), chunk: int(chunk)}
		fr := NewFrameReaderSize(r, int(maxBody), 0)
		bufLen, buf0 := len(fr.buf), &fr.buf[0]
		limit := fr.MaxBody()
		var re []byte
		var err error
		for {
			var fm Frame
			fm, err = fr.Next()
			if len(fr.buf) != bufLen || &fr.buf[0] != buf0 {
				t.Fatalf("buffer reallocated: %d -> %d bytes", bufLen, len(fr.buf))
			}
			if err != nil {
				break
			}
			if fm.Offset < 0 || len(fm.Body) > limit {
				t.Fatalf("accepted offset %d body %d (limit %d)", fm.Offset, len(fm.Body), limit)
			}
			re = AppendFrame(re, fm.Offset, fm.Body)
		}
		if !bytes.HasPrefix(data, re) {
			t.Fatalf("accepted frames do not re-encode to the input prefix")
		}
		rest := data[len(re):]
		var he *HeaderError
		switch {
		case err == io.EOF:
			if len(rest) != 0 {
				t.Fatalf("io.EOF with %d bytes unparsed", len(rest))
			}
		case errors.As(err, &he):
			if len(rest) < HeaderSize {
				t.Fatalf("header error with only %d bytes", len(rest))
			}
			off, size := ParseHeader(rest)
			if off != he.Offset || size != he.Size {
				t.Fatalf("header error %v does not describe the header %d %d", err, off, size)
			}
			if size >= 0 && int(size) <= limit && off >= 0 {
				t.Fatalf("valid header rejected: %v", err)
			}
		case errors.Is(err, ErrTruncated):
			if !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || len(rest) == 0 {
				t.Fatalf("truncation error %v with %d bytes left", err, len(rest))
			}
			if len(rest) >= HeaderSize {
				if _, size := ParseHeader(rest); len(rest) >= HeaderSize+int(size) {
					t.Fatalf("complete frame reported truncated")
				}
			}
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}

func FuzzReportReader(f *testing.F) {
	f.Add(reports(1, 2, 3), uint8(0))
	f.Add(reports(1, 2, 3, 1<<40), uint8(5))
	f.Add(append(reports(9), 0xff, 0xff), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		r := &fuzzReader{data: bytes.Clone(data), chunk: int(chunk)}
		rr := NewReportReader(r)
		var got []int64
		var err error
		for {
			var v int64
			if v, err = rr.Next(); err != nil {
				break
			}
			got = append(got, v)
		}
		// Model: per read, the last aligned value it completed; the first
		// negative completed value stops the stream.
		var want []int64
		var wantErr error = io.EOF
		pos := 0
	model:
		for _, n := range r.reads {
			end := pos + n
			var last int64
			found := false
			for v := pos / ReportSize * ReportSize; v+ReportSize <= end; v += ReportSize {
				x := ParseReport(data[v:])
				if x < 0 {
					wantErr = ErrNegativeOffset
					break model
				}
				last, found = x, true
			}
			if found {
				want = append(want, last)
			}
			pos = end
		}
		if wantErr == io.EOF && len(data)%ReportSize != 0 {
			wantErr = ErrTruncated
		}
		if !equalInts(got, want) {
			t.Fatalf("got %v, want %v (reads %v)", got, want, r.reads)
		}
		if wantErr == io.EOF && err != io.EOF || !errors.Is(err, wantErr) {
			t.Fatalf("error %v, want %v", err, wantErr)
		}
		// Accepted values re-encode to the bytes they came from.
		for _, v := range got {
			if v < 0 {
				t.Fatalf("negative value %d accepted", v)
			}
		}
	})
}

// FuzzDirectReader: a DirectReader accepts exactly the frames and returns
// the same error class as a FrameReader on the same bytes, however the
// reads are cut and whatever piece sizes the body is read with.
func FuzzDirectReader(f *testing.F) {
	f.Add(encodeFrames(directFrames()), uint16(0), uint8(0), uint16(0))
	f.Add(encodeFrames(directFrames()), uint16(40000), uint8(7), uint16(100))
	f.Add(encodeFrames(sampleFrames()), uint16(100), uint8(5), uint16(3))
	f.Add(AppendFrame(nil, 0, nil), uint16(0), uint8(1), uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, maxBody uint16, chunk uint8, step uint16) {
		ref := NewFrameReader(bytes.NewReader(data), int(maxBody))
		want, wantErr := readAllFrames(t, ref)
		vr := &vecReader{chunkReader: chunkReader{chunks: [][]byte{bytes.Clone(data)}}, maxChunk: int(chunk)}
		dr := NewDirectReader(vr, int(maxBody))
		got, err := readAllDirect(t, dr, int(step))
		if !equalFrames(got, want) {
			t.Fatalf("frames differ: %d direct, %d reference", len(got), len(want))
		}
		switch {
		case wantErr == io.EOF:
			if err != io.EOF {
				t.Fatalf("error %v, want io.EOF", err)
			}
		case errors.Is(wantErr, ErrTruncated):
			if !errors.Is(err, ErrTruncated) || errors.Is(err, io.EOF) {
				t.Fatalf("error %v, want truncation", err)
			}
		default:
			var he, rhe *HeaderError
			if !errors.As(err, &he) || !errors.As(wantErr, &rhe) || *he != *rhe {
				t.Fatalf("error %v, want %v", err, wantErr)
			}
		}
	})
}
