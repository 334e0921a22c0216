package grpcopt

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// gRPC's proto codec takes its buffers from mem.DefaultBufferPool, whose
// tiers jump from 32 KiB to 1 MiB and which zeroes every buffer it hands out
// (grpc-go issue #8790): a 32 KiB append or read chunk, a few bytes over the
// tier, costs a 1 MiB memclr on each side. plugin-boundary.md measured the
// fix used here: the same proto encoding over a power-of-two pool that does
// not zero (gRPC overwrites every byte it hands out), forced on both sides.
// The wire format is unchanged ("proto").

// bufferPool is a mem.BufferPool with one sync.Pool per power of two from
// 256 B to 64 MiB; it never zeroes. Larger requests are not pooled.
type bufferPool struct {
	tiers [19]sync.Pool // 2^8 .. 2^26
}

const minTierShift, maxTierShift = 8, 26

var pool = &bufferPool{}

func tierOf(n int) int {
	if n <= 1<<minTierShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minTierShift
}

func (p *bufferPool) Get(n int) *[]byte {
	t := tierOf(n)
	if t >= len(p.tiers) {
		b := make([]byte, n)
		return &b
	}
	if v := p.tiers[t].Get(); v != nil {
		b := v.(*[]byte)
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(t+minTierShift))
	return &b
}

func (p *bufferPool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minTierShift || c&(c-1) != 0 {
		return // not one of ours
	}
	t := bits.Len(uint(c)) - 1 - minTierShift
	if t >= len(p.tiers) {
		return
	}
	*b = (*b)[:c]
	p.tiers[t].Put(b)
}

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
