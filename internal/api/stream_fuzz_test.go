package api

import (
	"testing"

	"google.golang.org/grpc/mem"

	"github.com/replicatorhq/replicator/sdk/proto/producerv1"
	"github.com/replicatorhq/replicator/sdk/record"
)

// FuzzStreamRequest decodes arbitrary bytes as a producer stream batch the
// way the server does (batchCodec) and checks every message: it never
// panics, a decoding error is kept (never returned: the stream must answer
// the messages it took before it ends), and a message either becomes a
// valid record message or is refused as not stored with a reason.
func FuzzStreamRequest(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0x0f, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := New(Config{Backend: newFake(), MaxBodyBytes: 1024})
		if err != nil {
			t.Fatal(err)
		}
		b := &recvBatch{req: new(producerv1.PutRequest)}
		codec := batchCodec{s.stream.grpcCodec()}
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, b); err != nil {
			t.Fatalf("the codec returned %v; it must keep decoding errors in the batch", err)
		}
		if b.size != len(data) {
			t.Fatalf("size %d of %d bytes", b.size, len(data))
		}
		if b.err != nil {
			return
		}
		for _, m := range b.req.GetMessages() {
			msg, res := s.stream.message(m, s.cfg.StoreHost)
			switch {
			case res != nil:
				if msg != nil || res.GetStorage() != producerv1.Storage_STORAGE_NOT_STORED || res.GetMessage() == "" || res.GetSequence() != m.GetSequence() ||
					(res.GetError() != producerv1.Error_ERROR_INVALID_MESSAGE && res.GetError() != producerv1.Error_ERROR_TOO_LARGE) {
					t.Fatalf("refusal %v for %v", res, m)
				}
			default:
				if record.ValidateTopic(msg.Topic) != nil || len(msg.Body) == 0 || len(msg.Body) > 1024 || msg.QueueID < 0 || msg.QueueID > MaxQueueID {
					t.Fatalf("accepted an invalid message %+v", msg)
				}
				if _, err := record.EncodeProperties(msg.Properties); len(msg.Properties) > 0 && err != nil {
					t.Fatalf("accepted invalid properties: %v", err)
				}
			}
		}
	})
}
