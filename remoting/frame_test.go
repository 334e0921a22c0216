package remoting

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	var clean []string
	for _, line := range strings.Split(s, "\n") {
		line, _, _ = strings.Cut(line, "#")
		clean = append(clean, strings.Fields(line)...)
	}
	b, err := hex.DecodeString(strings.Join(clean, ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBinaryFrameBytes checks a ROCKETMQ-serialised request against a frame
// written by hand from the layout in the spec and doc.go.
func TestBinaryFrameBytes(t *testing.T) {
	want := unhex(t, `
		00000021             # length 33 = 4 + 29
		0100001d             # serialize type 1, header length 29
		0015                 # code 21
		00                   # language JAVA
		018b                 # version 395
		00000001             # opaque 1
		00000000             # flag 0
		00000000             # remark: none
		00000008             # extFields: 8 bytes
		0001 61 00000001 62  # "a" -> "b"
	`)
	c := &Command{Code: GetAllTopicConfig, Language: LanguageJava, Version: 395, Opaque: 1, ExtFields: map[string]string{"a": "b"}, Serialize: ROCKETMQ}
	got, err := AppendFrame(nil, c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded\n%x\nwant\n%x", got, want)
	}
	dec, err := DecodeFrame(want, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dec, c) {
		t.Fatalf("decoded %+v, want %+v", dec, c)
	}
}

// TestBinaryResponseWithRemarkAndBody: a response (flag bit 0), a remark and
// a body after the header.
func TestBinaryResponseWithRemarkAndBody(t *testing.T) {
	want := unhex(t, `
		0000001e             # length 30 = 4 + 24 + 2
		01000018             # type 1, header 24
		0003 09 0000         # code 3, language GO, version 0
		0000002a             # opaque 42
		00000001             # flag: response
		00000003 6e6f21      # remark "no!"
		00000000             # no extFields
		7b7d                 # body "{}"
	`)
	c := &Command{Code: RequestCodeNotSupported, Language: LanguageGo, Opaque: 42, Flag: FlagResponse, Remark: "no!", Body: []byte("{}"), Serialize: ROCKETMQ}
	got, err := AppendFrame(nil, c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded\n%x\nwant\n%x", got, want)
	}
	dec, err := DecodeFrame(want, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !dec.IsResponse() || dec.IsOneway() || !reflect.DeepEqual(dec, c) {
		t.Fatalf("decoded %+v, want %+v", dec, c)
	}
}

// TestJSONFrameBytes: the JSON header is fastjson's RemotingCommand form.
func TestJSONFrameBytes(t *testing.T) {
	header := `{"code":43,"extFields":{"k":"v\"w"},"flag":2,"language":"GO","opaque":7,"remark":"r","serializeTypeCurrentRPC":"JSON","version":-1}`
	want := append(unhex(t, "0000008b 00000083"), header...)
	want = append(want, "body"...)
	if len(header) != 0x83 {
		t.Fatalf("hand-written header is %d bytes, fix the expected frame", len(header))
	}
	c := &Command{Code: GetAllConsumerOffset, Language: LanguageGo, Version: -1, Opaque: 7, Flag: FlagOneway, Remark: "r", ExtFields: map[string]string{"k": `v"w`}, Body: []byte("body"), Serialize: JSON}
	got, err := AppendFrame(nil, c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded\n%q\nwant\n%q", got, want)
	}
	dec, err := DecodeFrame(want, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !dec.IsOneway() || !reflect.DeepEqual(dec, c) {
		t.Fatalf("decoded %+v, want %+v", dec, c)
	}
}

// TestJSONHeaderAsJavaWritesIt decodes a header as a Java broker sends a
// response: extFields {} (a custom header without fields), no remark,
// members in another order, an unknown member, the language by ordinal.
func TestJSONHeaderAsJavaWritesIt(t *testing.T) {
	for _, header := range []string{
		`{"code":0,"extFields":{},"flag":1,"language":"JAVA","opaque":3,"serializeTypeCurrentRPC":"JSON","version":453}`,
		`{"version":453,"opaque":3,"flag":1,"code":0,"language":0,"unknown":[1,2]}`,
	} {
		frame := append(unhex(t, "00000000 00000000"), header...)
		frame[3] = byte(len(frame) - 4)
		frame[7] = byte(len(header))
		c, err := DecodeFrame(frame, 0)
		if err != nil {
			t.Fatalf("%s: %v", header, err)
		}
		want := &Command{Code: 0, Language: LanguageJava, Version: 453, Opaque: 3, Flag: FlagResponse, Serialize: JSON}
		if !reflect.DeepEqual(c, want) {
			t.Fatalf("%s: decoded %+v, want %+v", header, c, want)
		}
	}
}

// TestJSONUnknownLanguageName: a language name newer than LanguageCode's
// list reads as OTHER rather than closing the connection.
func TestJSONUnknownLanguageName(t *testing.T) {
	header := `{"code":1,"language":"COBOL"}`
	frame := append(unhex(t, "00000021 0000001d"), header...)
	c, err := DecodeFrame(frame, 0)
	if err != nil || c.Language != LanguageOther {
		t.Fatalf("%+v, %v", c, err)
	}
}

func TestDecodeFrameRejects(t *testing.T) {
	cases := []struct {
		name  string
		frame string
		want  error
	}{
		{"short", "000000", ErrMalformed},
		{"length below 4", "00000003 00000000", ErrMalformed},
		{"negative length", "ffffffff 00000000", ErrMalformed},
		{"length over bound", "7fffffff 00000000", ErrFrameTooLarge},
		{"length mismatch", "00000008 00000000", ErrMalformed},
		{"header over frame", "00000004 00000001", ErrMalformed},
		{"unknown serialize type", "00000004 02000000", ErrMalformed},
		{"empty JSON header", "00000004 00000000", ErrMalformed},
		{"JSON without code", "00000006 00000002 7b7d", ErrMalformed},
		{"JSON language not a name", "00000021 0000001d" + hex.EncodeToString([]byte(`{"code":1,"language":[1,2,3]}`)), ErrMalformed},
		{"binary too short", "00000005 01000001 00", ErrMalformed},
		{"binary remark overrun", "00000019 01000015 0015 00 0000 00000001 00000000 00000064 00000000", ErrMalformed},
		{"binary negative remark", "00000019 01000015 0015 00 0000 00000001 00000000 ffffffff 00000000", ErrMalformed},
		{"binary ext overrun", "00000019 01000015 0015 00 0000 00000001 00000000 00000000 00000010", ErrMalformed},
		{"binary ext short of header", "0000001a 01000016 0015 00 0000 00000001 00000000 00000000 00000000 00", ErrMalformed},
		{"binary key overrun", "0000001c 01000018 0015 00 0000 00000001 00000000 00000000 00000003 0005 61", ErrMalformed},
		{"binary value overrun", "00000020 0100001c 0015 00 0000 00000001 00000000 00000000 00000007 0001 61 00000009", ErrMalformed},
		{"binary remark not UTF-8", "0000001a 01000016 0015 00 0000 00000001 00000000 00000001 ff 00000000", ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeFrame(unhex(t, tc.frame), 1<<20)
			if !errors.Is(err, tc.want) {
				t.Fatalf("DecodeFrame: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestAppendFrameRejects(t *testing.T) {
	for _, c := range []*Command{
		{Code: 40000, Serialize: ROCKETMQ},
		{Code: 1, Version: -40000, Serialize: ROCKETMQ},
		{Code: 1, Language: 200, Serialize: JSON},
		{Code: 1, Serialize: 7},
		{Code: 1, ExtFields: map[string]string{strings.Repeat("k", 40000): "v"}, Serialize: ROCKETMQ},
	} {
		if b, err := AppendFrame([]byte("x"), c); !errors.Is(err, ErrInvalidCommand) || string(b) != "x" {
			t.Errorf("AppendFrame(%+v) = %q, %v; want dst unchanged and ErrInvalidCommand", c, b, err)
		}
	}
	// Unknown languages are fine in binary headers (one byte, as RocketMQ).
	b, err := AppendFrame(nil, &Command{Code: 1, Language: 200, Serialize: ROCKETMQ})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := DecodeFrame(b, 0); err != nil || c.Language != 200 {
		t.Fatalf("decoded %+v, %v", c, err)
	}
}

// TestReader reads frames split at every byte, checks the bound is applied
// before reading the frame, and tells EOF from a cut frame.
func TestReader(t *testing.T) {
	var stream []byte
	want := []*Command{
		{Code: 21, Opaque: 1, Serialize: JSON, Language: LanguageGo},
		{Code: 201, Opaque: 2, Serialize: ROCKETMQ, Body: bytes.Repeat([]byte("x"), 5000)},
		{Code: 0, Opaque: 2, Flag: FlagResponse, Serialize: JSON, Language: LanguageJava, Remark: "ok", Body: []byte(`{"a":1}`)},
	}
	for _, c := range want {
		var err error
		if stream, err = AppendFrame(stream, c); err != nil {
			t.Fatal(err)
		}
	}
	r := NewReader(&oneByteReader{data: stream}, 0)
	for i, w := range want {
		c, err := r.Read()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !reflect.DeepEqual(c, w) {
			t.Fatalf("frame %d: %+v, want %+v", i, c, w)
		}
	}
	if _, err := r.Read(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
	if _, err := NewReader(bytes.NewReader(stream[:20]), 0).Read(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut frame: %v, want io.ErrUnexpectedEOF", err)
	}
	// A 2 GiB length with a 64 KiB bound fails on the 4 length bytes alone.
	big := &countingReader{data: unhex(t, "7ffffff0")}
	if _, err := NewReader(big, 64<<10).Read(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("huge length: %v, want ErrFrameTooLarge", err)
	}
	// A peer that announces 16 MiB and sends 10 bytes costs a small buffer.
	lie := NewReader(bytes.NewReader(append(unhex(t, "00fffff8 01000000"), make([]byte, 8)...)), 0)
	if _, err := lie.Read(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("announced 16 MiB, sent 12 bytes: %v", err)
	}
	if c := cap(lie.buf); c > 1<<20 {
		t.Fatalf("the reader holds %d bytes for a frame that sent 12", c)
	}
	// Exactly at the bound passes, one byte over fails.
	at, _ := AppendFrame(nil, &Command{Code: 1, Serialize: ROCKETMQ, Body: make([]byte, 100)})
	if _, err := NewReader(bytes.NewReader(at), len(at)).Read(); err != nil {
		t.Fatalf("frame at the bound: %v", err)
	}
	if _, err := NewReader(bytes.NewReader(at), len(at)-1).Read(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("frame one byte over the bound: %v", err)
	}
}

type oneByteReader struct{ data []byte }

func (r *oneByteReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	p[0] = r.data[0]
	r.data = r.data[1:]
	return 1, nil
}

type countingReader struct{ data []byte }

func (r *countingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestNewResponse(t *testing.T) {
	req := &Command{Code: 99, Opaque: 5, Version: 7, Serialize: ROCKETMQ}
	r := NewResponse(req, RequestCodeNotSupported, NotSupportedRemark(99))
	if !r.IsResponse() || r.Opaque != 5 || r.Serialize != ROCKETMQ || r.Remark != " request type 99 not supported" {
		t.Fatalf("%+v", r)
	}
}

func BenchmarkDecodeFrame(b *testing.B) {
	for _, st := range []SerializeType{JSON, ROCKETMQ} {
		frame, _ := AppendFrame(nil, &Command{Code: 0, Flag: FlagResponse, Opaque: 9, Serialize: st, ExtFields: map[string]string{"totalTopicNum": "2000"}, Body: make([]byte, 64<<10)})
		b.Run(st.String(), func(b *testing.B) {
			b.SetBytes(int64(len(frame)))
			for b.Loop() {
				if _, err := DecodeFrame(frame, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
