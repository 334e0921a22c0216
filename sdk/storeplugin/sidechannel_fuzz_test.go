package storeplugin

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/replicatorhq/replicator/sdk/plugin"
	"github.com/replicatorhq/replicator/sdk/proto/storev1"
)

func frame(m proto.Message) []byte {
	b, _ := proto.Marshal(m)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// FuzzAppendChannelFrame: the side channel's frame reader never panics,
// rejects a length above plugin.MaxMessageBytes before allocating, and
// reads back what frameConn.write framed.
func FuzzAppendChannelFrame(f *testing.F) {
	f.Add(frame(&storev1.AppendBatch{Seq: 1, Ops: []*storev1.AppendOp{{Op: &storev1.AppendOp_InPlace{InPlace: &storev1.InPlace{Offset: 7, Length: 9}}}}}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3})
	f.Add([]byte{0, 0, 0, 5, 0x08})
	f.Fuzz(func(t *testing.T, data []byte) {
		fc := readFrom(bytes.NewReader(data))
		for {
			var b storev1.AppendBatch
			err := fc.read(&b)
			if err != nil {
				if len(data) >= 4 && binary.BigEndian.Uint32(data) > plugin.MaxMessageBytes && !errors.Is(err, errFrameTooLarge) {
					t.Fatalf("oversized first frame: %v", err)
				}
				if cap(fc.rbuf) > plugin.MaxMessageBytes {
					t.Fatalf("allocated %d bytes", cap(fc.rbuf))
				}
				return
			}
		}
	})
}
