package metadata

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replicatorhq/replicator/sdk/meta"
)

func TestDocumentDecodeEncode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in string
		v        meta.DataVersion
		body     string
	}{
		{"rocketmq topics", `{"dataVersion":{"counter":3,"stateVersion":0,"timestamp":17},"topicConfigTable":{"T":{"readQueueNums":4}}}`,
			meta.DataVersion{StateVersion: 0, Timestamp: 17, Counter: 3}, `{"topicConfigTable":{"T":{"readQueueNums":4}}}`},
		{"no version (4.x consumerOffset)", `{"offsetTable":{"T@g":{0:12,1:7}}}`,
			meta.DataVersion{}, `{"offsetTable":{"T@g":{"0":12,"1":7}}}`},
		{"version last, order kept", "{\n \"b\": 1,\n \"a\": [1, 2],\n \"dataVersion\": {\"timestamp\": 4, \"counter\": 1}\n}",
			meta.DataVersion{StateVersion: 0, Timestamp: 4, Counter: 1}, `{"b":1,"a":[1, 2]}`},
		{"empty", `{}`, meta.DataVersion{}, `{}`},
		{"negative bare keys", `{"t":{-1:5}}`, meta.DataVersion{}, `{"t":{"-1":5}}`},
		{"html chars kept", `{"<a&b>":"x"}`, meta.DataVersion{}, `{"<a&b>":"x"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, body, err := DecodeDocument([]byte(c.in))
			if err != nil {
				t.Fatal(err)
			}
			if v != c.v || string(body) != c.body {
				t.Fatalf("got %+v %s, want %+v %s", v, body, c.v, c.body)
			}
			enc := EncodeDocument(v, body)
			if !bytes.HasPrefix(enc, []byte(`{"dataVersion":{`)) || !json.Valid(enc) {
				t.Fatalf("encoded %s", enc)
			}
			v2, body2, err := DecodeDocument(enc)
			if err != nil || v2 != v || !bytes.Equal(body2, body) {
				t.Fatalf("round trip: %+v %s %v", v2, body2, err)
			}
		})
	}
}

func TestDocumentDecodeRejects(t *testing.T) {
	t.Parallel()
	for _, in := range []string{``, `null`, `[1]`, `"s"`, `12`, `{`, `{"a":1`, `{"a":1}x`, `{a:1}`, `{"dataVersion":"x"}`,
		`{"dataVersion":{"counter":1.5}}`, `{-:1}`, "{\"a\":\"\x01\"}", `{0:1,}`} {
		if _, _, err := DecodeDocument([]byte(in)); !errors.Is(err, meta.ErrInvalidDocument) {
			t.Errorf("DecodeDocument(%q) = %v, want meta.ErrInvalidDocument", in, err)
		}
	}
}

func TestDocumentValidateName(t *testing.T) {
	t.Parallel()
	good := []string{"topics.json", "consumerOffset.json", "x", "timer-metrics", "my topics.json", "ünïcode.json", strings.Repeat("a", MaxNameLen)}
	for _, n := range good {
		if err := ValidateName(n); err != nil {
			t.Errorf("ValidateName(%q) = %v", n, err)
		}
	}
	bad := []string{"", "a/b", `a\b`, "..", "a..b", "../x", ".", ".hidden", "x.tmp", "x.bak", "a\x00b", "a\nb", "a\x7fb", "a\u0085b",
		"\xff", strings.Repeat("a", MaxNameLen+1), strings.Repeat("a", 256)}
	for _, n := range bad {
		if err := ValidateName(n); !errors.Is(err, meta.ErrInvalidName) {
			t.Errorf("ValidateName(%q) = %v, want meta.ErrInvalidName", n, err)
		}
	}
}

// FuzzDecodeDocument: the decoder never panics, and whatever it accepts
// encodes to a document that decodes to the same version and body.
func FuzzDecodeDocument(f *testing.F) {
	for _, s := range []string{
		`{"dataVersion":{"stateVersion":0,"timestamp":17,"counter":3},"topicConfigTable":{}}`,
		`{"offsetTable":{"T@g":{0:12,1:7}}}`,
		`{"a":[1,{"b":{2:3}}],"dataVersion":null}`,
		`{}`, `[]`, `{0:}`, `{"x":"\"{1:2}"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, body, err := DecodeDocument(data)
		if err != nil {
			if !errors.Is(err, meta.ErrInvalidDocument) {
				t.Fatalf("error %v does not wrap meta.ErrInvalidDocument", err)
			}
			return
		}
		if !json.Valid(body) || body[0] != '{' {
			t.Fatalf("body %q is not a JSON object", body)
		}
		enc := EncodeDocument(v, body)
		v2, body2, err := DecodeDocument(enc)
		if err != nil || v2 != v || !bytes.Equal(body2, body) {
			t.Fatalf("round trip of %q: %+v %q %v", data, v2, body2, err)
		}
	})
}

// TestDocumentFuzzCorpusCommitted keeps the seed corpus in the repository.
func TestDocumentFuzzCorpusCommitted(t *testing.T) {
	t.Parallel()
	ents, err := os.ReadDir(filepath.Join("testdata", "fuzz", "FuzzDecodeDocument"))
	if err != nil || len(ents) == 0 {
		t.Fatalf("no committed corpus: %v", err)
	}
}
