package producerwire

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/replicatorhq/replicator/internal/grpcpool"
)

// Marshaler is a message that encodes itself (a batch of the stream).
type Marshaler interface {
	// Size is the length of the encoding; AppendTo appends exactly that.
	Size() int
	AppendTo(b []byte) []byte
}

// Unmarshaler is a message that decodes itself from gRPC's received
// buffers. It must not keep data past the call without taking a
// reference (mem.Buffer.Ref), and must keep a decoding error to itself
// when the stream has to answer what it took before it ends.
type Unmarshaler interface {
	UnmarshalBuffers(data mem.BufferSlice) error
}

// Codec is the stream's gRPC codec: Marshalers and Unmarshalers encode
// themselves with this package, other messages (none on the producer
// stream today) go through protobuf-go. Its name is "proto": the bytes
// are the protobuf encoding. Its buffers come from Pool.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// Name is the content subtype, "proto".
func (Codec) Name() string { return "proto" }

// Marshal encodes v into a buffer of Pool (gRPC frees it once written).
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(Marshaler); ok {
		n := m.Size()
		if mem.IsBelowBufferPoolingThreshold(n) {
			return mem.BufferSlice{mem.SliceBuffer(m.AppendTo(make([]byte, 0, n)))}, nil
		}
		buf := Pool.Get(n)
		*buf = m.AppendTo((*buf)[:0])
		if len(*buf) != n {
			Pool.Put(buf)
			return nil, fmt.Errorf("producerwire: %T announced %d bytes and encoded another length", v, n)
		}
		return mem.BufferSlice{mem.NewBuffer(buf, Pool)}, nil
	}
	pm, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("producerwire: cannot marshal %T", v)
	}
	b, err := proto.Marshal(pm)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

// Unmarshal decodes data into v.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if u, ok := v.(Unmarshaler); ok {
		return u.UnmarshalBuffers(data)
	}
	pm, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("producerwire: cannot unmarshal into %T", v)
	}
	buf := data.MaterializeToBuffer(Pool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), pm)
}

// Hold returns data as one buffer the caller owns (Free it when done):
// data's only buffer with a reference taken, or a copy into a buffer of
// Pool.
func Hold(data mem.BufferSlice) mem.Buffer {
	if len(data) == 1 {
		data[0].Ref()
		return data[0]
	}
	return data.MaterializeToBuffer(Pool)
}

// Pool is the buffer pool of the stream's codec and of its gRPC
// transports (experimental.BufferPool, experimental.WithBufferPool):
// grpcpool.Pool, which does not zero the buffers it hands out.
var Pool = grpcpool.Pool
