package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"testing"
)

// modelSlave is an independent reading of the slave->master grammar: the
// frames a correct reader returns, then io.EOF, ErrTruncated, or the
// sentinel of the first bad frame and where that frame starts.
func modelSlave(data []byte) (frames []SlaveFrame, err error, at int) {
	pos := 0
	for {
		rest := data[pos:]
		if len(rest) == 0 {
			return frames, io.EOF, pos
		}
		if len(rest) < 4 {
			return frames, ErrTruncated, pos
		}
		st := HAState(int32(binary.BigEndian.Uint32(rest)))
		var size int
		switch st {
		case 1:
			size = 16
		case 2:
			size = 12
		default:
			return frames, ErrBadState, pos
		}
		if len(rest) < size {
			return frames, ErrTruncated, pos
		}
		f := SlaveFrame{State: st}
		if st == 1 {
			f.Handshake.SyncFromLastFile = rest[4] == 0 && rest[5] == 1
			f.Handshake.AsyncLearner = rest[6] == 0 && rest[7] == 1
			f.Handshake.BrokerID = int64(binary.BigEndian.Uint64(rest[8:]))
		} else {
			f.Offset = int64(binary.BigEndian.Uint64(rest[4:]))
			if f.Offset < 0 {
				return frames, ErrNegativeOffset, pos
			}
		}
		frames = append(frames, f)
		pos += size
	}
}

func FuzzSlaveFrameReader(f *testing.F) {
	stream, _ := sampleSlaveStream()
	f.Add(stream, uint8(0))
	f.Add(stream, uint8(5))
	f.Add(reports(4096, 8192), uint8(1))
	f.Add(AppendAck(AppendAck(nil, 1), -1), uint8(3))
	f.Add(stream[:20], uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		sr := NewSlaveFrameReader(&fuzzReader{data: bytes.Clone(data), chunk: int(chunk)})
		got, err := readAllSlave(sr)
		want, werr, at := modelSlave(data)
		if !slices.Equal(got, want) {
			t.Fatalf("frames %+v, want %+v", got, want)
		}
		switch {
		case werr == io.EOF:
			if err != io.EOF {
				t.Fatalf("error %v, want io.EOF", err)
			}
		case werr == ErrTruncated:
			if !errors.Is(err, ErrTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				t.Fatalf("error %v, want truncation", err)
			}
		default:
			var fe *FrameError
			if !errors.Is(err, werr) || !errors.As(err, &fe) || fe.Stream != int64(at) {
				t.Fatalf("error %v, want %v at %d", err, werr, at)
			}
		}
	})
}

// modelMaster is an independent reading of the master->slave grammar, as
// modelSlave.
func modelMaster(data []byte, maxBody int) (frames []asFrame, err error, at int) {
	pos := 0
	be := binary.BigEndian
	for {
		rest := data[pos:]
		if len(rest) == 0 {
			return frames, io.EOF, pos
		}
		if len(rest) < 4 {
			return frames, ErrTruncated, pos
		}
		switch st := int32(be.Uint32(rest)); st {
		case 1:
			if len(rest) < 20 {
				return frames, ErrTruncated, pos
			}
			size := int32(be.Uint32(rest[4:]))
			maxOff := int64(be.Uint64(rest[8:]))
			switch {
			case size < 0:
				return frames, ErrNegativeSize, pos
			case size%12 != 0:
				return frames, ErrBadHandshake, pos
			case size > 12000:
				return frames, ErrTooManyEpochs, pos
			case maxOff < 0:
				return frames, ErrNegativeOffset, pos
			case len(rest) < 20+int(size):
				return frames, ErrTruncated, pos
			}
			h := MasterHandshake{MaxOffset: maxOff, LastEpoch: int32(be.Uint32(rest[16:]))}
			for i := 20; i < 20+int(size); i += 12 {
				e := EpochEntry{Epoch: int32(be.Uint32(rest[i:])), StartOffset: int64(be.Uint64(rest[i+4:]))}
				if e.StartOffset < 0 {
					return frames, ErrNegativeOffset, pos
				}
				h.Epochs = append(h.Epochs, e)
			}
			frames = append(frames, asFrame{State: 1, Hs: h})
			pos += 20 + int(size)
		case 2:
			if len(rest) < 36 {
				return frames, ErrTruncated, pos
			}
			size := int32(be.Uint32(rest[4:]))
			h := TransferHeader{Size: size, Offset: int64(be.Uint64(rest[8:])), Epoch: int32(be.Uint32(rest[16:])),
				EpochStartOffset: int64(be.Uint64(rest[20:])), ConfirmOffset: int64(be.Uint64(rest[28:]))}
			switch {
			case size < 0:
				return frames, ErrNegativeSize, pos
			case int(size) > maxBody:
				return frames, ErrFrameTooLarge, pos
			case h.Offset < 0 || h.EpochStartOffset < 0 || h.ConfirmOffset < 0:
				return frames, ErrNegativeOffset, pos
			case len(rest) < 36+int(size):
				return frames, ErrTruncated, pos
			}
			frames = append(frames, asFrame{State: 2, Transfer: h, Body: rest[36 : 36+int(size)]})
			pos += 36 + int(size)
		default:
			return frames, ErrBadState, pos
		}
	}
}

func checkModelError(t *testing.T, err, werr error, at int) {
	t.Helper()
	switch {
	case werr == io.EOF:
		if err != io.EOF {
			t.Fatalf("error %v, want io.EOF", err)
		}
	case werr == ErrTruncated:
		if !errors.Is(err, ErrTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			t.Fatalf("error %v, want truncation", err)
		}
	default:
		var fe *FrameError
		if !errors.Is(err, werr) || !errors.As(err, &fe) || fe.Stream != int64(at) {
			t.Fatalf("error %v, want %v at %d", err, werr, at)
		}
	}
}

func FuzzMasterFrameReader(f *testing.F) {
	f.Add(encodeAS(f, sampleMaster()), uint16(100), uint8(0))
	f.Add(encodeAS(f, sampleMaster()), uint16(0), uint8(7))
	f.Add(encodeAS(f, largeMaster()[:3]), uint16(0), uint8(0))
	for _, c := range masterRejects(f) {
		f.Add(c.in, uint16(1024), uint8(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, maxBody uint16, chunk uint8) {
		mr := newMasterFrameReaderSize(&fuzzReader{data: bytes.Clone(data), chunk: int(chunk)}, int(maxBody), 0)
		bufLen := len(mr.buf)
		got, err := readAllMasterFrames(mr)
		if len(mr.buf) != bufLen {
			t.Fatalf("buffer reallocated")
		}
		want, werr, at := modelMaster(data, mr.MaxBody())
		if !equalAS(got, want) {
			t.Fatalf("%d frames, want %d", len(got), len(want))
		}
		checkModelError(t, err, werr, at)
		if re := encodeAS(t, got); !bytes.HasPrefix(data, re) {
			t.Fatalf("accepted frames do not re-encode to the input prefix")
		}
	})
}

// FuzzAutoSwitchDirectReader: the direct reader accepts exactly the frames
// of the grammar and fails the same way, however reads and body pieces are
// cut.
func FuzzAutoSwitchDirectReader(f *testing.F) {
	// Bodies above directMin (4 KiB) take the direct path; kept small so
	// that the fuzzer mutates them quickly.
	fs := largeMaster()
	direct := encodeAS(f, []asFrame{fs[0], fs[7], fs[5], fs[6], transferFrame(fs[7].Transfer.End(), 2, 60000, 0, make([]byte, 4100))})
	f.Add(direct, uint16(0), uint8(0), uint16(0))
	f.Add(direct, uint16(0), uint8(37), uint16(1000))
	f.Add(encodeAS(f, sampleMaster()), uint16(100), uint8(5), uint16(3))
	for _, c := range masterRejects(f) {
		f.Add(c.in, uint16(1024), uint8(1), uint16(1))
	}
	f.Fuzz(func(t *testing.T, data []byte, maxBody uint16, chunk uint8, step uint16) {
		vr := &vecReader{chunkReader: chunkReader{chunks: [][]byte{bytes.Clone(data)}}, maxChunk: int(chunk)}
		d := NewAutoSwitchDirectReader(vr, int(maxBody))
		got, err := readAllDirectAS(t, d, int(step))
		want, werr, at := modelMaster(data, d.MaxBody())
		if !equalAS(got, want) {
			t.Fatalf("%d frames, want %d", len(got), len(want))
		}
		checkModelError(t, err, werr, at)
	})
}
