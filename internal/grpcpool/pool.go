// Package grpcpool is a gRPC buffer pool (mem.BufferPool) that does not
// zero the buffers it hands out.
//
// gRPC's default pool (mem.DefaultBufferPool) has tiers that jump from
// 32 KiB to 1 MiB and zeroes every buffer it hands out (grpc-go issue
// #8790): a message a few bytes over a tier costs a 1 MiB memclr, and every
// batch of the producer stream a 32 KiB one (a tenth of a producer's CPU at
// 64 senders). gRPC overwrites every byte of a buffer it is given, so the
// zeroing buys nothing. Pool has one sync.Pool per power of two from 256 B
// to 64 MiB; larger buffers are not pooled. The producer stream's codec
// (internal/producerwire) and its transports use it.
package grpcpool

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// Pool is the shared non-zeroing pool.
var Pool mem.BufferPool = &bufferPool{}

type bufferPool struct {
	tiers [19]sync.Pool // 2^8 .. 2^26
}

const minTierShift = 8

func tierOf(n int) int {
	if n <= 1<<minTierShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minTierShift
}

// Get returns a buffer of length n, not zeroed.
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

// Put takes back a buffer of Get's (others are left to the collector).
func (p *bufferPool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minTierShift || c&(c-1) != 0 {
		return
	}
	t := bits.Len(uint(c)) - 1 - minTierShift
	if t >= len(p.tiers) {
		return
	}
	*b = (*b)[:c]
	p.tiers[t].Put(b)
}
