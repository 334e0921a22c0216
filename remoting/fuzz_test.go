package remoting

import (
	"errors"
	"reflect"
	"testing"
)

// FuzzDecodeFrame: no input panics; every error is ErrMalformed or
// ErrFrameTooLarge; a frame that decodes re-encodes (in its serialize type)
// to a frame that decodes to the same command.
func FuzzDecodeFrame(f *testing.F) {
	for _, c := range []*Command{
		{Code: GetAllTopicConfig, Opaque: 1, Serialize: JSON, Language: LanguageJava},
		{Code: GetAllTopicConfig, Opaque: 1, Serialize: ROCKETMQ, ExtFields: map[string]string{"topicSeq": "0", "maxTopicNum": "2000"}},
		{Code: Success, Opaque: 2, Flag: FlagResponse, Serialize: JSON, Remark: "x", Body: []byte(`{"offsetTable":{"t@g":{0:1}}}`)},
	} {
		b, err := AppendFrame(nil, c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeFrame(data, 1<<20)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("error %v is neither ErrMalformed nor ErrFrameTooLarge", err)
			}
			return
		}
		again, err := AppendFrame(nil, c)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", c, err)
		}
		c2, err := DecodeFrame(again, 1<<30)
		if err != nil {
			t.Fatalf("re-encoded frame %q does not decode: %v", again, err)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip changed the command:\n%+v\n%+v", c, c2)
		}
	})
}
