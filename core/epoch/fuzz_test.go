package epoch

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// FuzzDecode: Decode never panics, fails only with ErrCorrupt, and what it
// accepts is a valid list that Encode writes back byte for byte (unless the
// input's CRC line was the "not checked" 0).
func FuzzDecode(f *testing.F) {
	f.Add([]byte("0\n0\n"))
	f.Add([]byte("2\n773307083\n7-7000\n8-8000\n"))
	f.Add([]byte("2\n1694929738\n1-0\n2-4096\n"))
	f.Add([]byte("3\n0\n1-0\n2-50\n3-50\n"))
	f.Add([]byte("1\n0\n2147483647-9223372036854775807\n"))
	f.Add([]byte("99999\n0\n1-0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Decode error %v does not wrap ErrCorrupt", err)
			}
			if es != nil {
				t.Fatalf("Decode returned entries with an error: %+v", es)
			}
			return
		}
		for i, e := range es {
			if e.Epoch < 0 || e.StartOffset < 0 {
				t.Fatalf("negative entry %+v", e)
			}
			if i > 0 && (e.Epoch <= es[i-1].Epoch || e.StartOffset < es[i-1].StartOffset) {
				t.Fatalf("entries out of order: %+v then %+v", es[i-1], e)
			}
			wantEnd := Unbounded
			if i+1 < len(es) {
				wantEnd = es[i+1].StartOffset
			}
			if e.EndOffset != wantEnd {
				t.Fatalf("entry %d end %d, want %d", i, e.EndOffset, wantEnd)
			}
		}
		out := Encode(es)
		again, err := Decode(out)
		if err != nil {
			t.Fatalf("Decode(Encode(%+v)): %v", es, err)
		}
		if len(es) > 0 && !reflect.DeepEqual(again, es) {
			t.Fatalf("round trip %+v != %+v", again, es)
		}
		crcLine := b[bytes.IndexByte(b, '\n')+1:]
		if !bytes.HasPrefix(crcLine, []byte("0\n")) && !bytes.Equal(out, b) {
			t.Fatalf("Encode(Decode(%q)) = %q", b, out)
		}
	})
}
