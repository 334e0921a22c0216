package api

import (
	"testing"

	"google.golang.org/grpc/mem"

	"github.com/replicatorhq/replicator/internal/producerwire"
	"github.com/replicatorhq/replicator/sdk/proto/producerv1"
	"github.com/replicatorhq/replicator/sdk/record"
)

// FuzzStreamRequest decodes arbitrary bytes as a producer stream batch the
// way the server does (recvBatch, producerwire) and checks every message: it never
// panics, a decoding error is kept (never returned: the stream must answer
// the messages it took before it ends), and a message either becomes a
// valid record message or is refused as not stored with a reason.
func FuzzStreamRequest(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0x0f, 0x01})
	var seed []byte
	seed = producerwire.AppendRequestMessage(seed, 1, "TopicA", 3, []byte("body"), map[string]string{"TAGS": "t"})
	seed = producerwire.AppendRequestMessage(seed, 2, "bad topic", 0, []byte("body"), nil)
	seed = producerwire.AppendRequestMessage(seed, 3, "TopicA", 0, nil, nil)
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := New(Config{Backend: newFake(), MaxBodyBytes: 1024})
		if err != nil {
			t.Fatal(err)
		}
		b := &recvBatch{max: DefaultStreamBatchMessages}
		defer b.release()
		if err := (producerwire.Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, b); err != nil {
			t.Fatalf("the codec returned %v; it must keep decoding errors in the batch", err)
		}
		if b.size != len(data) {
			t.Fatalf("size %d of %d bytes", b.size, len(data))
		}
		if b.err != nil {
			return
		}
		for i := range b.msgs {
			m := &b.msgs[i]
			var msg record.Message
			res, ok := s.stream.message(m, s.cfg.StoreHost, &msg)
			switch {
			case !ok:
				if producerv1.Storage(res.Storage) != producerv1.Storage_STORAGE_NOT_STORED || res.Message == "" || res.Sequence != m.Sequence ||
					(producerv1.Error(res.Error) != producerv1.Error_ERROR_INVALID_MESSAGE && producerv1.Error(res.Error) != producerv1.Error_ERROR_TOO_LARGE) {
					t.Fatalf("refusal %+v for %+v", res, m)
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
