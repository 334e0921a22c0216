package grpcopt

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/replicatorhq/replicator/internal/grpcpool"
)

// gRPC's proto codec takes its buffers from mem.DefaultBufferPool, whose
// tiers jump from 32 KiB to 1 MiB and which zeroes every buffer it hands out
// (grpc-go issue #8790): a 32 KiB append or read chunk, a few bytes over the
// tier, costs a 1 MiB memclr on each side. plugin-boundary.md measured the
// fix used here: the same proto encoding over a power-of-two pool that does
// not zero (gRPC overwrites every byte it hands out), forced on both sides.
// The wire format is unchanged ("proto").

// pool is the non-zeroing pool (internal/grpcpool), shared with the
// producer stream.
var pool = grpcpool.Pool

// codec is gRPC's proto codec on the non-zeroing pool.
type codec struct{}

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("plugin codec: cannot marshal %T, not a proto.Message", v)
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := pool.Get(size)
	out, err := opts.MarshalAppend((*buf)[:0], m)
	if err != nil {
		pool.Put(buf)
		return nil, err
	}
	*buf = out
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("plugin codec: cannot unmarshal into %T, not a proto.Message", v)
	}
	buf := data.MaterializeToBuffer(pool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

var _ encoding.CodecV2 = codec{}

func codecServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ForceServerCodecV2(codec{}), experimental.BufferPool(pool)}
}

func codecDialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec{})), experimental.WithBufferPool(pool)}
}
