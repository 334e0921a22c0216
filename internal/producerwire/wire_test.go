package producerwire

import (
	"bytes"
	"errors"
	"maps"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/replicatorhq/replicator/sdk/proto/producerv1"
)

func seedRequests() [][]byte {
	var out [][]byte
	for _, req := range []*producerv1.PutRequest{
		{},
		{Messages: []*producerv1.Message{{Sequence: 1, Topic: "TopicA", QueueId: 3, Body: []byte("hello")}}},
		{Messages: []*producerv1.Message{
			{Sequence: 7, Topic: "T", QueueId: -1, Body: []byte{0}, Properties: map[string]string{"TAGS": "a", "": "", "KEYS": "k1 k2"}},
			{Sequence: 1 << 40, Topic: "T"},
			{},
		}},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
	// Unknown fields, a group, repeated scalars, invalid UTF-8.
	out = append(out,
		[]byte{0x0a, 0x06, 0x08, 0x01, 0x08, 0x02, 0x30, 0x05},
		[]byte{0x0a, 0x04, 0x33, 0x08, 0x01, 0x34, 0x10, 0x01},
		[]byte{0x0a, 0x03, 0x12, 0x01, 0xff},
		[]byte{0x0a, 0x02, 0x12, 0x05},
		[]byte{0xff, 0xff, 0xff, 0x0f, 0x01},
	)
	return out
}

// dropUnknown forgets m's unknown fields (the codec skips them).
func dropUnknown(m proto.Message) { m.ProtoReflect().SetUnknown(nil) }

// FuzzDecodeRequest checks DecodeRequest against protobuf-go: the same
// bytes decode to the same messages, or fail in both.
func FuzzDecodeRequest(f *testing.F) {
	for _, b := range seedRequests() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want producerv1.PutRequest
		werr := proto.Unmarshal(data, &want)
		var d Decoder
		got, err := d.DecodeRequest(data, nil, 1<<20)
		if (werr == nil) != (err == nil) {
			t.Fatalf("protobuf-go: %v, DecodeRequest: %v", werr, err)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if len(got) != len(want.Messages) {
			t.Fatalf("%d messages, protobuf-go %d", len(got), len(want.Messages))
		}
		for i, w := range want.Messages {
			g := got[i]
			if g.Sequence != w.Sequence || g.Topic != w.Topic || g.QueueID != w.QueueId || !bytes.Equal(g.Body, w.Body) ||
				!maps.Equal(g.Properties, w.Properties) {
				t.Fatalf("message %d: %+v, protobuf-go %v", i, g, w)
			}
		}
		// Encoding what was decoded gives bytes protobuf-go reads back the same.
		var enc []byte
		for _, m := range got {
			enc = AppendRequestMessage(enc, m.Sequence, m.Topic, m.QueueID, m.Body, m.Properties)
		}
		var back producerv1.PutRequest
		if err := proto.Unmarshal(enc, &back); err != nil {
			t.Fatal(err)
		}
		dropUnknown(&want)
		for _, m := range want.Messages {
			dropUnknown(m)
		}
		if !proto.Equal(&back, &want) {
			t.Fatalf("re-encoded %v, want %v", &back, &want)
		}
		if n := 0; len(got) > 0 {
			if _, err := d.DecodeRequest(data, nil, n); !errors.Is(err, ErrTooManyMessages) {
				t.Fatalf("bound %d: %v", n, err)
			}
		}
	})
}

// FuzzDecodeResponse checks DecodeResponse against protobuf-go and
// AppendResult's encoding against protobuf-go's reading of it.
func FuzzDecodeResponse(f *testing.F) {
	for _, resp := range []*producerv1.PutResponse{
		{},
		{Results: []*producerv1.Result{{Sequence: 1, Storage: producerv1.Storage_STORAGE_STORED, Status: producerv1.Status_PUT_OK, Offset: 10, NextOffset: 200, QueueOffset: 3, Epoch: 2, BrokerId: 1}}},
		{Results: []*producerv1.Result{
			{Sequence: 2, Storage: producerv1.Storage_STORAGE_NOT_STORED, Error: producerv1.Error_ERROR_SLAVE_WRITE_PROTECTED, Message: "slave", MasterApi: "http://127.0.0.1:1"},
			{Sequence: 3, Error: producerv1.Error_ERROR_INTERNAL, Offset: -1, Epoch: -5},
		}},
	} {
		b, err := proto.Marshal(resp)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x03, 0x42, 0x01, 0xff})
	f.Add([]byte{0x0a, 0x04, 0x20, 0x80, 0x80, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		var want producerv1.PutResponse
		werr := proto.Unmarshal(data, &want)
		got, err := DecodeResponse(data, nil)
		if (werr == nil) != (err == nil) {
			t.Fatalf("protobuf-go: %v, DecodeResponse: %v", werr, err)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if len(got) != len(want.Results) {
			t.Fatalf("%d results, protobuf-go %d", len(got), len(want.Results))
		}
		var enc []byte
		for i, w := range want.Results {
			g := got[i]
			if g != (Result{Sequence: w.Sequence, Storage: int32(w.Storage), Status: int32(w.Status), Offset: w.Offset, NextOffset: w.NextOffset,
				QueueOffset: w.QueueOffset, Error: int32(w.Error), Message: w.Message, MasterAPI: w.MasterApi, Epoch: w.Epoch, BrokerID: w.BrokerId}) {
				t.Fatalf("result %d: %+v, protobuf-go %v", i, g, w)
			}
			enc = AppendResult(enc, &g)
		}
		var back producerv1.PutResponse
		if err := proto.Unmarshal(enc, &back); err != nil {
			t.Fatal(err)
		}
		dropUnknown(&want)
		for _, r := range want.Results {
			dropUnknown(r)
		}
		if !proto.Equal(&back, &want) {
			t.Fatalf("re-encoded %v, want %v", &back, &want)
		}
	})
}

// TestSizes: the sizes the encoders announce are what they append.
func TestSizes(t *testing.T) {
	props := map[string]string{"TAGS": "t", "KEYS": "k"}
	b := AppendRequestMessage(nil, 300, "Topic", -2, make([]byte, 200), props)
	if n := SizeRequestMessage(300, "Topic", -2, make([]byte, 200), props); n != len(b) {
		t.Fatalf("SizeRequestMessage %d, appended %d", n, len(b))
	}
	if n := SizeRequestMessage(0, "", 0, nil, nil); n != 2 {
		t.Fatalf("empty message: %d bytes", n)
	}
}

func BenchmarkDecodeRequest(b *testing.B) {
	req := &producerv1.PutRequest{}
	for i := range 32 {
		req.Messages = append(req.Messages, &producerv1.Message{Sequence: uint64(i + 1), Topic: "TopicBench", QueueId: int32(i % 8), Body: make([]byte, 1024)})
	}
	data, _ := proto.Marshal(req)
	b.Run("protobuf-go", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var r producerv1.PutRequest
			if err := proto.Unmarshal(data, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("producerwire", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		var d Decoder
		var dst []Message
		for b.Loop() {
			var err error
			if dst, err = d.DecodeRequest(data, dst[:0], 4096); err != nil {
				b.Fatal(err)
			}
		}
	})
}
