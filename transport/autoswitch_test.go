package transport

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
)

// asHex decodes a hex string with spaces and "|" separators.
func asHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.NewReplacer(" ", "", "|", "").Replace(s))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func TestHAStateString(t *testing.T) {
	want := map[HAState]string{
		StateReady: "READY", StateHandshake: "HANDSHAKE", StateTransfer: "TRANSFER",
		StateSuspend: "SUSPEND", StateShutdown: "SHUTDOWN", 5: "HAState(5)", -1: "HAState(-1)",
	}
	for s, w := range want {
		if s.String() != w {
			t.Errorf("%d: %q, want %q", int32(s), s.String(), w)
		}
	}
	if StateReady != 0 || StateHandshake != 1 || StateTransfer != 2 || StateSuspend != 3 || StateShutdown != 4 {
		t.Fatal("HAConnectionState ordinals changed")
	}
}

func TestAutoSwitchSizes(t *testing.T) {
	if SlaveHandshakeSize != 16 || AckSize != 12 || MasterHandshakeHeaderSize != 20 || EpochEntrySize != 12 ||
		TransferHeaderSize != 36 || MaxHandshakeEpochs != 1000 || MaxMasterHandshakeSize != 12020 ||
		MaxTransferBodyLimit != 4194268 {
		t.Fatal("wire sizes changed")
	}
}

func TestSlaveHandshakeBytes(t *testing.T) {
	cases := []struct {
		h    SlaveHandshake
		want string
	}{
		{SlaveHandshake{}, "00000001 | 0000 | 0000 | 0000000000000000"},
		{SlaveHandshake{SyncFromLastFile: true, BrokerID: 7}, "00000001 | 0001 | 0000 | 0000000000000007"},
		{SlaveHandshake{AsyncLearner: true, BrokerID: 0x0102030405060708}, "00000001 | 0000 | 0001 | 0102030405060708"},
		{SlaveHandshake{true, true, -2}, "00000001 | 0001 | 0001 | fffffffffffffffe"},
	}
	for _, c := range cases {
		got := AppendSlaveHandshake([]byte{0xaa}, c.h)
		if want := append([]byte{0xaa}, asHex(t, c.want)...); !bytes.Equal(got, want) {
			t.Errorf("%+v: % x, want % x", c.h, got, want)
		}
	}
}

func TestAckBytes(t *testing.T) {
	got := AppendAck(nil, 0x0102030405060708)
	if want := asHex(t, "00000002 | 0102030405060708"); !bytes.Equal(got, want) {
		t.Fatalf("% x, want % x", got, want)
	}
	got = AppendAck(got, 0)
	if want := asHex(t, "00000002 0102030405060708 | 00000002 0000000000000000"); !bytes.Equal(got, want) {
		t.Fatalf("% x, want % x", got, want)
	}
}

func TestMasterHandshakeBytes(t *testing.T) {
	h := MasterHandshake{MaxOffset: 0x1000, LastEpoch: 3, Epochs: []EpochEntry{{1, 0}, {3, 0x800}}}
	got, err := AppendMasterHandshake(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	want := asHex(t, "00000001 | 00000018 | 0000000000001000 | 00000003 |"+
		"00000001 0000000000000000 | 00000003 0000000000000800")
	if !bytes.Equal(got, want) {
		t.Fatalf("% x\nwant % x", got, want)
	}
	got, err = AppendMasterHandshake(nil, MasterHandshake{})
	if want := asHex(t, "00000001 00000000 0000000000000000 00000000"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("empty: % x %v", got, err)
	}
}

func TestMasterHandshakeLimits(t *testing.T) {
	es := make([]EpochEntry, MaxHandshakeEpochs+1)
	for i := range es {
		es[i] = EpochEntry{Epoch: int32(i + 1), StartOffset: int64(i) * 100}
	}
	b, err := AppendMasterHandshake([]byte{9}, MasterHandshake{MaxOffset: 1, Epochs: es[:MaxHandshakeEpochs]})
	if err != nil || len(b) != 1+MaxMasterHandshakeSize {
		t.Fatalf("1000 entries: %d bytes, %v", len(b), err)
	}
	b, err = AppendMasterHandshake([]byte{9}, MasterHandshake{MaxOffset: 1, Epochs: es})
	if !errors.Is(err, ErrTooManyEpochs) || !bytes.Equal(b, []byte{9}) {
		t.Fatalf("1001 entries: %d bytes, %v", len(b), err)
	}
	if _, err := AppendMasterHandshake(nil, MasterHandshake{MaxOffset: -1}); !errors.Is(err, ErrNegativeOffset) {
		t.Fatalf("negative max offset: %v", err)
	}
	if _, err := AppendMasterHandshake(nil, MasterHandshake{Epochs: []EpochEntry{{1, -5}}}); !errors.Is(err, ErrNegativeOffset) {
		t.Fatalf("negative start offset: %v", err)
	}
}

func TestTransferHeaderBytes(t *testing.T) {
	h := TransferHeader{Offset: 0x0102030405060708, Size: 0x20, Epoch: 5, EpochStartOffset: 0x1000, ConfirmOffset: 0xabcdef}
	b := make([]byte, TransferHeaderSize+2)
	b[TransferHeaderSize], b[TransferHeaderSize+1] = 0xee, 0xee
	PutTransferHeader(b, h)
	want := asHex(t, "00000002 | 00000020 | 0102030405060708 | 00000005 | 0000000000001000 | 0000000000abcdef | eeee")
	if !bytes.Equal(b, want) {
		t.Fatalf("% x\nwant % x", b, want)
	}
	if got := ParseTransferHeader(b); got != h {
		t.Fatalf("parse %+v, want %+v", got, h)
	}
	if h.End() != 0x0102030405060728 {
		t.Fatalf("end %x", h.End())
	}
	defer func() {
		if recover() == nil {
			t.Fatal("short buffer did not panic")
		}
	}()
	PutTransferHeader(make([]byte, TransferHeaderSize-1), h)
}

// ---- slave -> master frames ----

func sampleSlaveStream() ([]byte, []SlaveFrame) {
	want := []SlaveFrame{
		{State: StateHandshake, Handshake: SlaveHandshake{SyncFromLastFile: true, BrokerID: 3}},
		{State: StateTransfer, Offset: 0},
		{State: StateTransfer, Offset: 1 << 40},
		{State: StateHandshake, Handshake: SlaveHandshake{AsyncLearner: true, BrokerID: 9}},
		{State: StateTransfer, Offset: 77},
	}
	var b []byte
	for _, f := range want {
		if f.State == StateHandshake {
			b = AppendSlaveHandshake(b, f.Handshake)
		} else {
			b = AppendAck(b, f.Offset)
		}
	}
	return b, want
}

func readAllSlave(sr *SlaveFrameReader) ([]SlaveFrame, error) {
	var out []SlaveFrame
	for {
		f, err := sr.Next()
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
}

func TestSlaveFrameReaderSplitAnywhere(t *testing.T) {
	stream, want := sampleSlaveStream()
	for _, chunk := range []int{0, 1, 2, 3, 5, 11, 13} {
		r := &fuzzReader{data: bytes.Clone(stream), chunk: chunk}
		got, err := readAllSlave(NewSlaveFrameReader(r))
		if err != io.EOF || !slices.Equal(got, want) {
			t.Fatalf("chunk %d: %v %+v", chunk, err, got)
		}
	}
	for cut := 0; cut <= len(stream); cut++ {
		sr := NewSlaveFrameReader(&chunkReader{chunks: splitAt(bytes.Clone(stream), cut)})
		got, err := readAllSlave(sr)
		if err != io.EOF || !slices.Equal(got, want) || sr.StreamBytes() != int64(len(stream)) {
			t.Fatalf("cut %d: %v %+v", cut, err, got)
		}
	}
}

func TestSlaveFrameReaderFlagsAsJava(t *testing.T) {
	// RocketMQ's master takes a flag as true only when its i16 is 1.
	b := asHex(t, "00000001 0002 ffff 0000000000000001 | 00000001 0001 0001 0000000000000002")
	got, err := readAllSlave(NewSlaveFrameReader(bytes.NewReader(b)))
	want := []SlaveFrame{
		{State: StateHandshake, Handshake: SlaveHandshake{BrokerID: 1}},
		{State: StateHandshake, Handshake: SlaveHandshake{SyncFromLastFile: true, AsyncLearner: true, BrokerID: 2}},
	}
	if err != io.EOF || !slices.Equal(got, want) {
		t.Fatalf("%v %+v", err, got)
	}
}

func TestSlaveFrameReaderRejects(t *testing.T) {
	ack := AppendAck(nil, 5)
	cases := []struct {
		name   string
		in     []byte
		frames int
		err    error
		state  HAState
		stream int64
	}{
		{"ready", asHex(t, "00000000 0000000000000000"), 0, ErrBadState, StateReady, 0},
		{"suspend", asHex(t, "00000003"), 0, ErrBadState, StateSuspend, 0},
		{"shutdown", asHex(t, "00000004"), 0, ErrBadState, StateShutdown, 0},
		{"out of range", asHex(t, "00000005"), 0, ErrBadState, 5, 0},
		{"negative state", asHex(t, "ffffffff 0000000000000000"), 0, ErrBadState, -1, 0},
		// A classic slave's first report (its max offset, 8 bytes) read as
		// a state: the high word of any offset below 4 GiB is 0 (READY).
		{"classic report", reports(123456, 123456), 0, ErrBadState, StateReady, 0},
		{"after an ack", append(bytes.Clone(ack), asHex(t, "00000007")...), 1, ErrBadState, 7, AckSize},
		{"negative ack", append(bytes.Clone(ack), asHex(t, "00000002 ffffffffffffffff")...), 1, ErrNegativeOffset, StateTransfer, AckSize},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, chunk := range []int{0, 1} {
				sr := NewSlaveFrameReader(&fuzzReader{data: bytes.Clone(c.in), chunk: chunk})
				got, err := readAllSlave(sr)
				var fe *FrameError
				if len(got) != c.frames || !errors.Is(err, c.err) || !errors.As(err, &fe) {
					t.Fatalf("chunk %d: %d frames, %v", chunk, len(got), err)
				}
				if fe.State != c.state || fe.Stream != c.stream {
					t.Fatalf("error %+v, want state %v at %d", fe, c.state, c.stream)
				}
				if _, again := sr.Next(); again != err {
					t.Fatalf("not sticky: %v", again)
				}
			}
		})
	}
}

func TestSlaveFrameReaderBadStateBeforeRest(t *testing.T) {
	// The state is judged as soon as its 4 bytes are there: the reader does
	// not wait for a frame body that a broken peer may never send.
	r := &scriptReader{steps: []step{{data: asHex(t, "00000009")}, {err: errors.New("must not be read")}}}
	if _, err := NewSlaveFrameReader(r).Next(); !errors.Is(err, ErrBadState) {
		t.Fatalf("got %v", err)
	}
}

func TestSlaveFrameReaderEOF(t *testing.T) {
	stream, _ := sampleSlaveStream()
	for cut := 1; cut < len(stream); cut++ {
		sr := NewSlaveFrameReader(bytes.NewReader(stream[:cut]))
		_, err := readAllSlave(sr)
		boundary := slices.Contains([]int{16, 28, 40, 56}, cut)
		if boundary && err != io.EOF {
			t.Fatalf("cut %d on a boundary: %v", cut, err)
		}
		if !boundary && (!errors.Is(err, ErrTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)) {
			t.Fatalf("cut %d: %v", cut, err)
		}
	}
	if _, err := NewSlaveFrameReader(bytes.NewReader(nil)).Next(); err != io.EOF {
		t.Fatalf("empty: %v", err)
	}
}

func TestSlaveFrameReaderResumes(t *testing.T) {
	stream, want := sampleSlaveStream()
	r := &scriptReader{steps: []step{
		{data: stream[:3]}, {err: os.ErrDeadlineExceeded},
		{data: stream[3:20]}, {err: os.ErrDeadlineExceeded},
		{data: stream[20:]},
	}}
	sr := NewSlaveFrameReader(r)
	var got []SlaveFrame
	timeouts := 0
	for {
		f, err := sr.Next()
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
		got = append(got, f)
	}
	if timeouts != 2 || !slices.Equal(got, want) {
		t.Fatalf("timeouts %d, %+v", timeouts, got)
	}
}

func TestSlaveFrameReaderZeroAllocs(t *testing.T) {
	stream, _ := sampleSlaveStream()
	sr := NewSlaveFrameReader(&loopReader{b: stream})
	if a := testing.AllocsPerRun(1000, func() {
		if _, err := sr.Next(); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("%v allocs per frame", a)
	}
	bad := NewSlaveFrameReader(&loopReader{b: asHex(t, "00000009")})
	if a := testing.AllocsPerRun(100, func() { _, _ = bad.Next() }); a != 0 {
		t.Fatalf("%v allocs per rejected frame", a)
	}
}

func TestNoProgressAutoSwitch(t *testing.T) {
	if _, err := NewSlaveFrameReader(zeroReader{}).Next(); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("slave reader: %v", err)
	}
	if _, err := NewMasterFrameReader(zeroReader{}, 0).Next(); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("master reader: %v", err)
	}
	if _, err := NewAutoSwitchDirectReader(ReaderVec{zeroReader{}}, 0).Next(); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("direct reader: %v", err)
	}
}

// ---- master -> slave frames ----

// asFrame is a master frame with its slices copied.
type asFrame struct {
	State    HAState
	Hs       MasterHandshake
	Transfer TransferHeader
	Body     []byte
}

func (a asFrame) equal(b asFrame) bool {
	return a.State == b.State && a.Hs.MaxOffset == b.Hs.MaxOffset && a.Hs.LastEpoch == b.Hs.LastEpoch &&
		slices.Equal(a.Hs.Epochs, b.Hs.Epochs) && a.Transfer == b.Transfer && bytes.Equal(a.Body, b.Body)
}

func equalAS(a, b []asFrame) bool { return slices.EqualFunc(a, b, asFrame.equal) }

func copyFrame(f MasterFrame) asFrame {
	return asFrame{State: f.State, Transfer: f.Transfer, Body: bytes.Clone(f.Body),
		Hs: MasterHandshake{MaxOffset: f.Handshake.MaxOffset, LastEpoch: f.Handshake.LastEpoch,
			Epochs: slices.Clone(f.Handshake.Epochs)}}
}

func transferFrame(off int64, epoch int32, epochStart, confirm int64, body []byte) asFrame {
	return asFrame{State: StateTransfer, Body: body, Transfer: TransferHeader{
		Offset: off, Size: int32(len(body)), Epoch: epoch, EpochStartOffset: epochStart, ConfirmOffset: confirm}}
}

func encodeAS(t testing.TB, fs []asFrame) []byte {
	var b []byte
	for _, f := range fs {
		if f.State == StateHandshake {
			var err error
			if b, err = AppendMasterHandshake(b, f.Hs); err != nil {
				t.Fatal(err)
			}
			continue
		}
		var h [TransferHeaderSize]byte
		PutTransferHeader(h[:], f.Transfer)
		b = append(append(b, h[:]...), f.Body...)
	}
	return b
}

func sampleMaster() []asFrame {
	return []asFrame{
		{State: StateHandshake, Hs: MasterHandshake{MaxOffset: 300, LastEpoch: 4, Epochs: []EpochEntry{{1, 0}, {2, 100}, {4, 200}}}},
		transferFrame(0, 1, 0, 50, bytes.Repeat([]byte{1}, 100)),
		transferFrame(100, 2, 100, 150, bytes.Repeat([]byte{2}, 100)),
		transferFrame(200, 4, 200, 200, nil), // heartbeat
		transferFrame(200, 4, 200, 250, []byte("hello")),
		{State: StateHandshake, Hs: MasterHandshake{MaxOffset: 205, LastEpoch: 4}},
		transferFrame(205, 4, 200, 205, nil),
	}
}

func readAllMasterFrames(mr *MasterFrameReader) ([]asFrame, error) {
	var out []asFrame
	for {
		f, err := mr.Next()
		if err != nil {
			return out, err
		}
		if f.State == StateTransfer && int(f.Transfer.Size) != len(f.Body) {
			return out, errors.New("body size differs from header")
		}
		out = append(out, copyFrame(f))
	}
}

func TestMasterFrameBytes(t *testing.T) {
	// One handshake and one transfer frame, written out by hand.
	stream := asHex(t, "00000001 0000000c 0000000000000005 00000002 | 00000002 0000000000000000 |"+
		"00000002 00000003 0000000000000002 00000002 0000000000000000 0000000000000004 | 616263")
	got, err := readAllMasterFrames(NewMasterFrameReader(bytes.NewReader(stream), 0))
	want := []asFrame{
		{State: StateHandshake, Hs: MasterHandshake{MaxOffset: 5, LastEpoch: 2, Epochs: []EpochEntry{{2, 0}}}},
		transferFrame(2, 2, 0, 4, []byte("abc")),
	}
	if err != io.EOF || !equalAS(got, want) {
		t.Fatalf("%v %+v", err, got)
	}
	if enc := encodeAS(t, want); !bytes.Equal(enc, stream) {
		t.Fatalf("encoding % x\nwant % x", enc, stream)
	}
}

func TestMasterFrameReaderSplitAnywhere(t *testing.T) {
	want := sampleMaster()
	stream := encodeAS(t, want)
	for _, chunk := range []int{0, 1, 2, 7, 35, 37} {
		mr := newMasterFrameReaderSize(&fuzzReader{data: bytes.Clone(stream), chunk: chunk}, 128, 0)
		got, err := readAllMasterFrames(mr)
		if err != io.EOF || !equalAS(got, want) || mr.StreamBytes() != int64(len(stream)) || mr.Buffered() != 0 {
			t.Fatalf("chunk %d: %v %d frames", chunk, err, len(got))
		}
	}
	for cut := 0; cut <= len(stream); cut++ {
		mr := newMasterFrameReaderSize(&chunkReader{chunks: splitAt(bytes.Clone(stream), cut)}, 1024, 0)
		if got, err := readAllMasterFrames(mr); err != io.EOF || !equalAS(got, want) {
			t.Fatalf("cut %d: %v %d frames", cut, err, len(got))
		}
	}
}

func TestMasterFrameReaderEOF(t *testing.T) {
	fs := sampleMaster()
	stream := encodeAS(t, fs)
	bounds := map[int]bool{}
	n := 0
	for _, f := range fs {
		n += len(encodeAS(t, []asFrame{f}))
		bounds[n] = true
	}
	for cut := 1; cut < len(stream); cut++ {
		_, err := readAllMasterFrames(newMasterFrameReaderSize(bytes.NewReader(stream[:cut]), 1024, 0))
		if bounds[cut] {
			if err != io.EOF {
				t.Fatalf("cut %d on a boundary: %v", cut, err)
			}
			continue
		}
		if !errors.Is(err, ErrTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			t.Fatalf("cut %d: %v", cut, err)
		}
		_, derr := readAllDirectAS(t, NewAutoSwitchDirectReader(ReaderVec{bytes.NewReader(stream[:cut])}, 0), 0)
		if !errors.Is(derr, ErrTruncated) || errors.Is(derr, io.EOF) {
			t.Fatalf("direct, cut %d: %v", cut, derr)
		}
	}
}

// masterRejects are malformed master frames: each prefix is valid, the last
// frame is not, and its bytes after the header are never needed to judge it.
func masterRejects(t testing.TB) []struct {
	name  string
	in    []byte
	err   error
	field string
} {
	hb := func(s string) []byte { return asHex(t, s) }
	return []struct {
		name  string
		in    []byte
		err   error
		field string
	}{
		{"state ready", hb("00000000"), ErrBadState, "state"},
		{"state suspend", hb("00000003"), ErrBadState, "state"},
		{"state shutdown", hb("00000004"), ErrBadState, "state"},
		{"state 99", hb("00000063"), ErrBadState, "state"},
		{"state negative", hb("80000000"), ErrBadState, "state"},
		// a classic 12-byte frame at offset 0 read as AutoSwitch
		{"classic frame", AppendFrame(nil, 0, []byte("x")), ErrBadState, "state"},
		{"handshake negative size", hb("00000001 fffffff4 0000000000000000 00000001"), ErrNegativeSize, "bodySize"},
		{"handshake size not 12N", hb("00000001 0000000d 0000000000000000 00000001"), ErrBadHandshake, "bodySize"},
		{"handshake 1001 entries", hb("00000001 00002eec 0000000000000000 00000001"), ErrTooManyEpochs, "entries"},
		{"handshake huge size", hb("00000001 7ffffff8 0000000000000000 00000001"), ErrTooManyEpochs, "entries"},
		{"handshake negative max offset", hb("00000001 00000000 8000000000000000 00000001"), ErrNegativeOffset, "maxOffset"},
		{"handshake negative start offset", hb("00000001 00000018 0000000000000100 00000002 00000001 0000000000000000 00000002 ffffffffffffff00"), ErrNegativeOffset, "epoch 2 startOffset"},
		{"transfer negative size", hb("00000002 ffffffff 0000000000000000 00000001 0000000000000000 0000000000000000"), ErrNegativeSize, "bodySize"},
		{"transfer too large", hb("00000002 00000401 0000000000000000 00000001 0000000000000000 0000000000000000"), ErrFrameTooLarge, "bodySize"},
		{"transfer negative offset", hb("00000002 00000000 ffffffffffffffff 00000001 0000000000000000 0000000000000000"), ErrNegativeOffset, "offset"},
		{"transfer negative epoch start", hb("00000002 00000000 0000000000000000 00000001 fffffffffffffff0 0000000000000000"), ErrNegativeOffset, "epochStartOffset"},
		{"transfer negative confirm", hb("00000002 00000000 0000000000000000 00000001 0000000000000000 ffffffffffffffff"), ErrNegativeOffset, "confirmOffset"},
	}
}

func TestMasterFrameReaderRejects(t *testing.T) {
	prefix := encodeAS(t, sampleMaster()[:2])
	for _, c := range masterRejects(t) {
		t.Run(c.name, func(t *testing.T) {
			in := append(bytes.Clone(prefix), c.in...)
			for _, chunk := range []int{0, 1} {
				// No more bytes than the bad frame's own: its body is not awaited.
				r := &scriptReader{steps: []step{{data: in}, {err: errors.New("must not be read")}}}
				var src io.Reader = r
				if chunk == 1 {
					src = &fuzzReader{data: bytes.Clone(in), chunk: 1}
				}
				mr := NewMasterFrameReader(src, 1024)
				got, err := readAllMasterFrames(mr)
				var fe *FrameError
				if len(got) != 2 || !errors.Is(err, c.err) || !errors.As(err, &fe) {
					t.Fatalf("chunk %d: %d frames, %v", chunk, len(got), err)
				}
				if fe.Field != c.field || fe.Stream != int64(len(prefix)) {
					t.Fatalf("error %q: field %q stream %d, want %q at %d", err, fe.Field, fe.Stream, c.field, len(prefix))
				}
				if _, again := mr.Next(); again != err {
					t.Fatalf("not sticky: %v", again)
				}
				_, derr := readAllDirectAS(t, NewAutoSwitchDirectReader(ReaderVec{bytes.NewReader(in)}, 1024), 0)
				var dfe *FrameError
				if !errors.As(derr, &dfe) || *dfe != *fe {
					t.Fatalf("direct reader: %v, want %v", derr, err)
				}
			}
		})
	}
}

func TestMasterHandshakeMaxEpochsAccepted(t *testing.T) {
	es := make([]EpochEntry, MaxHandshakeEpochs)
	for i := range es {
		es[i] = EpochEntry{Epoch: int32(i + 1), StartOffset: int64(i) << 20}
	}
	want := []asFrame{{State: StateHandshake, Hs: MasterHandshake{MaxOffset: 1 << 40, LastEpoch: 1000, Epochs: es}}}
	stream := encodeAS(t, want)
	got, err := readAllMasterFrames(NewMasterFrameReader(bytes.NewReader(stream), 16))
	if err != io.EOF || !equalAS(got, want) {
		t.Fatalf("%v, %d frames", err, len(got))
	}
	dgot, err := readAllDirectAS(t, NewAutoSwitchDirectReader(&vecReader{chunkReader: chunkReader{chunks: [][]byte{stream}}, maxChunk: 7}, 16), 0)
	if err != io.EOF || !equalAS(dgot, want) {
		t.Fatalf("direct: %v, %d frames", err, len(dgot))
	}
}

func TestMasterFrameErrorMessage(t *testing.T) {
	in := asHex(t, "00000002 00000401 0000000000000000 00000001 0000000000000000 0000000000000000")
	_, err := NewMasterFrameReader(bytes.NewReader(in), 1024).Next()
	want := "transport: frame too large: TRANSFER frame at stream byte 0: bodySize 1025 limit 1024"
	if err == nil || err.Error() != want {
		t.Fatalf("%q\nwant %q", err, want)
	}
}

func TestMasterFrameReaderMaxBody(t *testing.T) {
	if m := NewMasterFrameReader(bytes.NewReader(nil), 0).MaxBody(); m != MaxTransferBodyLimit {
		t.Fatalf("default %d", m)
	}
	if m := NewMasterFrameReader(bytes.NewReader(nil), 1<<30).MaxBody(); m != MaxTransferBodyLimit {
		t.Fatalf("above limit %d", m)
	}
	body := make([]byte, 1000)
	ok := encodeAS(t, []asFrame{transferFrame(0, 1, 0, 0, body)})
	if _, err := readAllMasterFrames(NewMasterFrameReader(bytes.NewReader(ok), 1000)); err != io.EOF {
		t.Fatalf("at the limit: %v", err)
	}
	if _, err := readAllMasterFrames(NewMasterFrameReader(bytes.NewReader(ok), 999)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("above the limit: %v", err)
	}
}

func TestMasterFrameReaderResumes(t *testing.T) {
	want := sampleMaster()
	stream := encodeAS(t, want)
	for _, cut := range []int{2, 20, 40, 100, 250} {
		r := &scriptReader{steps: []step{{data: stream[:cut]}, {err: os.ErrDeadlineExceeded}, {data: stream[cut:]}}}
		mr := NewMasterFrameReader(r, 0)
		var got []asFrame
		timeouts := 0
		for {
			f, err := mr.Next()
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
			got = append(got, copyFrame(f))
		}
		if timeouts != 1 || !equalAS(got, want) {
			t.Fatalf("cut %d: %d timeouts, %d frames", cut, timeouts, len(got))
		}
	}
}

func TestMasterFrameReaderZeroAllocs(t *testing.T) {
	stream := encodeAS(t, sampleMaster())
	mr := newMasterFrameReaderSize(&loopReader{b: stream}, 1024, 4096)
	for range 7 { // the first handshake sizes the epoch slice once
		if _, err := mr.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if a := testing.AllocsPerRun(1000, func() {
		if _, err := mr.Next(); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("%v allocs per frame", a)
	}
}

func TestMasterFrameReaderBodyAliasing(t *testing.T) {
	stream := encodeAS(t, sampleMaster()[1:3])
	mr := NewMasterFrameReader(bytes.NewReader(stream), 0)
	f, err := mr.Next()
	if mr.Buffered() != len(stream)-TransferHeaderSize-100 {
		t.Fatalf("buffered %d after the first frame of a %d-byte stream", mr.Buffered(), len(stream))
	}
	if err != nil || cap(f.Body) != len(f.Body) {
		t.Fatalf("%v: body cap %d len %d (appending must not overwrite the next frame)", err, cap(f.Body), len(f.Body))
	}
}

// ---- direct reader ----

func readAllDirectAS(t testing.TB, d *AutoSwitchDirectReader, step int) ([]asFrame, error) {
	var out []asFrame
	for {
		f, err := d.Next()
		if err != nil {
			return out, err
		}
		if f.Body != nil {
			t.Fatalf("direct reader returned a body")
		}
		a := copyFrame(f)
		if f.State == StateTransfer {
			body := make([]byte, f.Transfer.Size)
			for got := 0; got < len(body); {
				end := len(body)
				if step > 0 {
					end = min(end, got+step)
				}
				n, err := d.Read(body[got:end])
				got += n
				if err != nil {
					return out, err
				}
			}
			if n, err := d.Read(make([]byte, 1)); n != 0 || err != io.EOF {
				t.Fatalf("read past the body: %d %v", n, err)
			}
			a.Body = body
		}
		out = append(out, a)
	}
}

func largeMaster() []asFrame {
	big := func(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }
	return []asFrame{
		{State: StateHandshake, Hs: MasterHandshake{MaxOffset: 1 << 20, LastEpoch: 2, Epochs: []EpochEntry{{1, 0}, {2, 60000}}}},
		transferFrame(0, 1, 0, 0, big(32<<10, 'a')),
		transferFrame(32<<10, 1, 0, 0, big(60000-32<<10, 'b')),
		transferFrame(60000, 2, 60000, 60000, big(100<<10, 'c')),
		transferFrame(60000+100<<10, 2, 60000, 60000, big(10, 'd')),
		transferFrame(60010+100<<10, 2, 60000, 60000, nil),
		{State: StateHandshake, Hs: MasterHandshake{MaxOffset: 7, LastEpoch: 9, Epochs: []EpochEntry{{9, 0}}}},
		transferFrame(60010+100<<10, 2, 60000, 60000, big(5000, 'e')),
	}
}

func TestAutoSwitchDirectReaderMatchesFrameReader(t *testing.T) {
	for _, fs := range [][]asFrame{sampleMaster(), largeMaster()} {
		stream := encodeAS(t, fs)
		for _, maxChunk := range []int{0, 1, 3, 36, 4096, 40000} {
			for _, step := range []int{0, 1, 1000} {
				if maxChunk == 1 && len(stream) > 1000 {
					continue // 3-byte reads cut a large stream finely enough, 200 000 reads fewer
				}
				vr := &vecReader{chunkReader: chunkReader{chunks: [][]byte{bytes.Clone(stream)}}, maxChunk: maxChunk}
				got, err := readAllDirectAS(t, NewAutoSwitchDirectReader(vr, 0), step)
				if err != io.EOF || !equalAS(got, fs) {
					t.Fatalf("chunk %d step %d: %v, %d frames", maxChunk, step, err, len(got))
				}
			}
		}
	}
}

func TestAutoSwitchDirectReaderVectored(t *testing.T) {
	fs := largeMaster()[1:4]
	// Each frame arrives in its own chunk, as written by a master with writev.
	var chunks [][]byte
	for _, f := range fs {
		chunks = append(chunks, encodeAS(t, []asFrame{f}))
	}
	vr := &vecReader{chunkReader: chunkReader{chunks: chunks}}
	d := NewAutoSwitchDirectReader(vr, 0)
	got, err := readAllDirectAS(t, d, 0)
	if err != io.EOF || !equalAS(got, fs) {
		t.Fatalf("%v, %d frames", err, len(got))
	}
	if vr.vecCalls == 0 {
		t.Fatal("no vectored read: large bodies were staged")
	}
}

func TestAutoSwitchDirectReaderMisuse(t *testing.T) {
	stream := encodeAS(t, []asFrame{transferFrame(0, 1, 0, 0, []byte("abcdef")), transferFrame(6, 1, 0, 0, nil)})
	d := NewAutoSwitchDirectReader(ReaderVec{bytes.NewReader(stream)}, 0)
	f, err := d.Next()
	if err != nil || f.Transfer.Size != 6 || d.Remaining() != 6 {
		t.Fatalf("%+v %v", f, err)
	}
	if _, err := d.Next(); !errors.Is(err, ErrBodyPending) {
		t.Fatalf("next with body pending: %v", err)
	}
	if n, err := d.Read(nil); n != 0 || err != nil {
		t.Fatalf("empty read: %d %v", n, err)
	}
	b := make([]byte, 10)
	if n, err := io.ReadFull(d, b[:6]); n != 6 || err != nil || string(b[:6]) != "abcdef" {
		t.Fatalf("%d %v %q", n, err, b[:6])
	}
	if f, err := d.Next(); err != nil || f.Transfer.Size != 0 || f.Transfer.Offset != 6 {
		t.Fatalf("heartbeat: %+v %v", f, err)
	}
	if _, err := d.Next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	if d.MaxBody() != MaxTransferBodyLimit || d.Buffered() != 0 {
		t.Fatalf("max body %d buffered %d", d.MaxBody(), d.Buffered())
	}
}

func TestAutoSwitchDirectReaderResumes(t *testing.T) {
	fs := largeMaster()
	stream := encodeAS(t, fs)
	for _, cut := range []int{3, 30, 100, 40000, 100000, len(stream) - 5} {
		d := NewAutoSwitchDirectReader(&timeoutOnce{data: stream, cut: cut}, 0)
		var got []asFrame
		timeouts := 0
		var cur *asFrame
		filled := 0
		for {
			if cur != nil && filled < len(cur.Body) {
				n, err := d.Read(cur.Body[filled:])
				filled += n
				if errors.Is(err, os.ErrDeadlineExceeded) {
					timeouts++
					continue
				}
				if err != nil {
					t.Fatalf("cut %d: body: %v", cut, err)
				}
				continue
			}
			if cur != nil {
				got = append(got, *cur)
				cur = nil
			}
			f, err := d.Next()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				timeouts++
				continue
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("cut %d: %v", cut, err)
			}
			a := copyFrame(f)
			a.Body = make([]byte, f.Transfer.Size)
			cur, filled = &a, 0
		}
		if timeouts != 1 || !equalAS(got, fs) {
			t.Fatalf("cut %d: %d timeouts, %d frames equal %v", cut, timeouts, len(got), equalAS(got, fs))
		}
	}
}

func TestAutoSwitchDirectReaderBadCount(t *testing.T) {
	if _, err := NewAutoSwitchDirectReader(badCount{}, 0).Next(); err == nil || !strings.Contains(err.Error(), "invalid read count") {
		t.Fatalf("got %v", err)
	}
}

// TestAutoSwitchWouldBlock: ErrWouldBlock from the stream (an armed
// ConnReader) comes back unwrapped, allocation-free and not sticky, at any
// point of a frame; reading on continues where it stopped.
func TestAutoSwitchWouldBlock(t *testing.T) {
	master := encodeAS(t, largeMaster())
	slave, wantSlave := sampleSlaveStream()
	for _, cut := range []int{0, 2, 19, 37, 5000, 40000} {
		steps := func(b []byte) []step {
			return []step{{data: b[:min(cut, len(b))]}, {err: ErrWouldBlock}, {data: b[min(cut, len(b)):]}}
		}
		sr := NewSlaveFrameReader(&scriptReader{steps: steps(slave)})
		var gotSlave []SlaveFrame
		blocked := 0
		for {
			f, err := sr.Next()
			if err == ErrWouldBlock {
				blocked++
				continue
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("slave reader, cut %d: %v", cut, err)
			}
			gotSlave = append(gotSlave, f)
		}
		if blocked != 1 || !slices.Equal(gotSlave, wantSlave) {
			t.Fatalf("slave reader, cut %d: blocked %d, %d frames", cut, blocked, len(gotSlave))
		}
		mr := NewMasterFrameReader(&scriptReader{steps: steps(master)}, 0)
		var got []asFrame
		blocked = 0
		for {
			f, err := mr.Next()
			if err == ErrWouldBlock {
				blocked++
				continue
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("master reader, cut %d: %v", cut, err)
			}
			got = append(got, copyFrame(f))
		}
		if blocked != 1 || !equalAS(got, largeMaster()) {
			t.Fatalf("master reader, cut %d: blocked %d, %d frames", cut, blocked, len(got))
		}
		d := NewAutoSwitchDirectReader(ReaderVec{&scriptReader{steps: steps(master)}}, 0)
		got, blocked = nil, 0
		var cur *asFrame
		filled := 0
		for {
			if cur != nil && filled < len(cur.Body) {
				n, err := d.Read(cur.Body[filled:])
				filled += n
				if err == ErrWouldBlock {
					blocked++
				} else if err != nil {
					t.Fatalf("direct reader body, cut %d: %v", cut, err)
				}
				continue
			}
			if cur != nil {
				got, cur = append(got, *cur), nil
			}
			f, err := d.Next()
			if err == ErrWouldBlock {
				blocked++
				continue
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("direct reader, cut %d: %v", cut, err)
			}
			a := copyFrame(f)
			a.Body = make([]byte, f.Transfer.Size)
			cur, filled = &a, 0
		}
		if blocked != 1 || !equalAS(got, largeMaster()) {
			t.Fatalf("direct reader, cut %d: blocked %d, %d frames", cut, blocked, len(got))
		}
	}
	// Allocation-free: a reader that always would block.
	mr := NewMasterFrameReader(asReaderFunc(func([]byte) (int, error) { return 0, ErrWouldBlock }), 0)
	sr := NewSlaveFrameReader(asReaderFunc(func([]byte) (int, error) { return 0, ErrWouldBlock }))
	if a := testing.AllocsPerRun(100, func() {
		if _, err := mr.Next(); err != ErrWouldBlock {
			t.Fatal(err)
		}
		if _, err := sr.Next(); err != ErrWouldBlock {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("%v allocs per would-block", a)
	}
}

type asReaderFunc func([]byte) (int, error)

func (f asReaderFunc) Read(p []byte) (int, error) { return f(p) }
